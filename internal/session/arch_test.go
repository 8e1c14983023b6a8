package session

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/aisb-dev/aisb/internal/engine/enginefake"
	"github.com/aisb-dev/aisb/internal/progs"
)

// TestSessionProgramsForEngineArch: for an engine that is not this host's
// Podman (ssh://), the session asks the engine's architecture and checks
// the programs against it, not against the CLI's: this machine's
// entrypoint is refused for the other machine's engine before any
// container is created; the control, an engine of this machine behind the
// same URI, runs the session.
func TestSessionProgramsForEngineArch(t *testing.T) {
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	for _, arch := range []string{runtime.GOARCH, other} {
		oc := newOrderCase(t, false)
		oc.o.Where.URI = "ssh://aisb@engine.invalid/run/user/1000/podman/podman.sock"
		oc.f.Architecture = arch
		oc.f.ExitOnStart(enginefake.Kind("sandbox"), 0)
		if arch == runtime.GOARCH {
			if code, err, _ := oc.run(t); err != nil || code != 0 {
				t.Errorf("engine linux/%s: exit %d, %v\n%s", arch, code, err, oc.stderr)
			}
			continue
		}
		_, err := Run(context.Background(), oc.o)
		if !errors.Is(err, progs.ErrWrongArch) {
			t.Errorf("engine linux/%s, entrypoint for linux/%s: %v, want %v", arch, runtime.GOARCH, err, progs.ErrWrongArch)
		}
		for _, c := range oc.f.Calls() {
			if c.Method == enginefake.ContainerCreate {
				t.Errorf("engine linux/%s: a container was created with the wrong programs: %s", arch, c)
			}
		}
		if !oc.p.closed {
			t.Error("the connection to Podman was not closed")
		}
	}
}
