package session

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestScanSockets(t *testing.T) {
	dir := t.TempDir()
	var log strings.Builder
	logf := func(f string, a ...any) { fmt.Fprintf(&log, f+"\n", a...) }

	// Control: no socket, no refusal, nothing said.
	if err := scanSockets(dir, time.Minute, false, logf)(); err != nil || log.Len() != 0 {
		t.Fatalf("empty project: %v %q", err, log.String())
	}

	ln, err := net.Listen("unix", filepath.Join(dir, "run\n.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = scanSockets(dir, time.Minute, false, logf)()
	var pe *ProjectSocketsError
	if !errors.Is(err, ErrProjectSockets) || !errors.As(err, &pe) || pe.Count != 1 {
		t.Fatalf("refusal: %v", err)
	}
	if !strings.Contains(log.String(), `"run\n.sock"`) || !strings.Contains(err.Error(), "--allow-project-sockets") {
		t.Errorf("refusal: %v\n%s", err, log.String())
	}

	log.Reset()
	if err := scanSockets(dir, time.Minute, true, logf)(); err != nil || !strings.Contains(log.String(), "--allow-project-sockets: the sandbox can connect to 1 UNIX socket file") {
		t.Errorf("allowed: %v %q", err, log.String())
	}

	// A scan cut short says so.
	for i := 0; i < 600; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o644)
	}
	log.Reset()
	scanSockets(dir, 0, true, logf)()
	if !strings.Contains(log.String(), "and stopped: sockets further in were not checked") {
		t.Errorf("cut short: %q", log.String())
	}
}
