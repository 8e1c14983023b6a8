package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/state"
)

// A session gate is finished after its session's aisb has returned: the
// session's watchdog waits until the gate has logged the sandbox's last
// requests, converts them into the audit and removes the gate (see
// session.Finish). While it works, the audit directory holds a marker beside
// the session's audit, so that `aisb audit` never shows that audit as if it
// were complete.

// Quiet is how long the access log must not grow, once no client
// connection is open, before the gate is taken to have logged everything.
const Quiet = 150 * time.Millisecond

// Quiesce waits until the gate has logged every request of a sandbox that
// is gone: squid holds no client connection on either port any more (it
// logs a request, a tunnel included, before it closes the client's socket)
// and its access log has been quiet for Quiet; it gives up after within. A
// tunnel to 443 the front handed to the TLS port is logged there, when the
// front's connection to it closes, which may be after the sandbox's
// connection to the front has gone: so the TLS port's clients count too.
func (g *Gate) Quiesce(within time.Duration) {
	log := filepath.Join(g.Dir, "access.log")
	size := func() int64 {
		fi, err := os.Lstat(log)
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	// The quiet window starts at the first look that finds it quiet, not
	// at the last that found it busy: the connection may have closed just
	// after that look, or just before this one.
	last, quiet, busy := size(), time.Now(), false
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		switch n := size(); {
		case n != last || g.clientConns() > 0:
			last, busy = n, true
		case busy:
			quiet, busy = time.Now(), false
		case time.Since(quiet) >= Quiet:
			return
		}
	}
}

// clientConns counts the connections squid holds open on its two ports (on
// the front only when the TLS port is not known: a gate found running).
func (g *Gate) clientConns() int {
	n := ClientConns(g.Port)
	if g.TLSPort > 0 {
		n += ClientConns(g.TLSPort)
	}
	return n
}

// ClientConns counts the connections a listener on 127.0.0.1:port holds
// open from its side (established, being set up, or closed by the client
// but not yet by the listener), from this network namespace's socket table.
func ClientConns(port int) int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0
	}
	local := fmt.Sprintf("0100007F:%04X", port)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 3 && f[1] == local {
			switch f[3] {
			case "01", "03", "08": // ESTABLISHED, SYN_RECV, CLOSE_WAIT
				n++
			}
		}
	}
	return n
}

// KillSquid kills the gate's squid through its host process (Squid), without
// Podman, and returns once it has exited, at most within: from then on its
// access log cannot grow. It reports false when it could not: no process
// recorded, or one that did not die in time.
func (g *Gate) KillSquid(within time.Duration) bool {
	pid, _, _ := strings.Cut(g.Squid, ":")
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 1 {
		return false
	}
	// Only that very process (pid and start time): a pid reused since is
	// left alone.
	if state.OwnerAlive(g.Squid) {
		_ = syscall.Kill(n, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(within); ; time.Sleep(5 * time.Millisecond) {
		if state.OwnerExited(g.Squid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Errors of an audit that `aisb audit` cannot show as complete.
var (
	// ErrAuditPending: the session has ended and its audit is still being
	// completed; lines may follow within a second.
	ErrAuditPending = errors.New("its session has ended and its last requests are still being added")
	// ErrAuditIncomplete: completing the audit failed, or whoever did it
	// stopped before it was done; requests may be missing.
	ErrAuditIncomplete = errors.New("the audit may be incomplete")
)

// finishing is the marker's content.
type finishing struct {
	Finisher string `json:"finisher"`        // "PID:STARTTIME" of the process completing the audit
	Error    string `json:"error,omitempty"` // why it could not
}

func markerPath(auditDir, session string) string {
	return filepath.Join(auditDir, session+".finishing")
}

// MarkFinishing records that finisher (a "PID:STARTTIME") now completes the
// audit of session.
func MarkFinishing(auditDir, session, finisher string) error {
	b, _ := json.Marshal(finishing{Finisher: finisher})
	if err := safefile.Write(markerPath(auditDir, session), b, 0o600); err != nil {
		return fmt.Errorf("mark the audit of %s as being completed: %w", session, err)
	}
	return nil
}

// FinishedAudit records the end of completing session's audit: the marker
// goes when ferr is nil, else it keeps ferr for `aisb audit` to tell.
func FinishedAudit(auditDir, session string, ferr error) error {
	path := markerPath(auditDir, session)
	if ferr == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("mark the audit of %s complete: %w", session, err)
		}
		return nil
	}
	b, _ := json.Marshal(finishing{Error: ferr.Error()})
	if err := safefile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("record that the audit of %s is incomplete (%v): %w", session, ferr, err)
	}
	return nil
}

// AuditState says whether session's audit is complete as far as aisb
// knows: nil, ErrAuditPending while it is being completed, or an error
// wrapping ErrAuditIncomplete with the reason.
func AuditState(auditDir, session string) error {
	b, err := safefile.Read(markerPath(auditDir, session), 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var m finishing
	if err != nil || json.Unmarshal(b, &m) != nil {
		return fmt.Errorf("%w (its marker %s is unreadable)", ErrAuditIncomplete, markerPath(auditDir, session))
	}
	switch {
	case m.Error != "":
		return fmt.Errorf("%w: %s", ErrAuditIncomplete, m.Error)
	case m.Finisher != "" && state.OwnerAlive(m.Finisher):
		return ErrAuditPending
	default:
		return fmt.Errorf("%w: the process completing it ended before it was done", ErrAuditIncomplete)
	}
}

// WaitAudit waits up to within for session's audit to be complete and
// returns AuditState at the end.
func WaitAudit(auditDir, session string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := AuditState(auditDir, session)
		if !errors.Is(err, ErrAuditPending) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
