package session

import (
	"errors"
	"fmt"
	"time"

	"github.com/aisb-dev/aisb/internal/project"
)

// ErrProjectSockets: the project holds UNIX socket files and the user did
// not pass --allow-project-sockets.
var ErrProjectSockets = errors.New("the project holds UNIX socket files")

// ProjectSocketsError lists what the scan found.
type ProjectSocketsError struct {
	Dir   string
	Count int
}

func (e *ProjectSocketsError) Error() string {
	return fmt.Sprintf("%s under %s (listed above): the sandbox could connect to whatever listens on them, "+
		"which the network table cannot see; stop those services or move their sockets out of the project, "+
		"or pass --allow-project-sockets to run anyway", pluralSockets(e.Count), project.Printable(e.Dir))
}

func (e *ProjectSocketsError) Unwrap() error { return ErrProjectSockets }

func pluralSockets(n int) string {
	if n == 1 {
		return "1 UNIX socket file"
	}
	return fmt.Sprintf("%d UNIX socket files", n)
}

// scanSockets starts the scan of the project for socket files and returns
// a function that waits for it and decides: nil, or a *ProjectSocketsError
// unless allow. It reports on stderr (through logf) what it found and
// whether the scan saw the whole tree.
func scanSockets(dir string, budget time.Duration, allow bool, logf func(string, ...any)) func() error {
	type result struct {
		r   project.SocketScan
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := project.ScanSockets(dir, budget)
		done <- result{r, err}
	}()
	return func() error {
		res := <-done
		r := res.r
		if res.err != nil {
			return fmt.Errorf("scan the project for socket files: %w", res.err)
		}
		if r.CutShort {
			logf("scanned %d entries of the project for UNIX socket files in %s and stopped: sockets further in were not checked", r.Entries, r.Elapsed.Round(time.Millisecond))
		}
		if n := len(r.Unreadable); n > 0 {
			logf("could not list %d directories of the project (first: %s): sockets in them were not checked", n, project.Printable(r.Unreadable[0]))
		}
		if r.Count == 0 {
			return nil
		}
		if allow {
			logf("--allow-project-sockets: the sandbox can connect to %s in the project:", pluralSockets(r.Count))
		} else {
			logf("%s in the project:", pluralSockets(r.Count))
		}
		for _, s := range r.Sockets {
			logf("  %s", project.Printable(s))
		}
		if r.Count > len(r.Sockets) {
			logf("  ... and %d more", r.Count-len(r.Sockets))
		}
		if allow {
			return nil
		}
		return &ProjectSocketsError{Dir: dir, Count: r.Count}
	}
}
