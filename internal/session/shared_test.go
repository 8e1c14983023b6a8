package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/engine/enginefake"
	"github.com/aisb-dev/aisb/internal/sandbox"
)

// TestSessionRemoteShared: an engine that is not local but whose check
// container read the token aisb wrote into the project and wrote its
// reply beside it gets the project bind-mounted, as a local one does: no
// volume, no copy, no review session; the rest still goes through the
// API (the policy copied in), and the check leaves nothing in the project
// or on the engine.
func TestSessionRemoteShared(t *testing.T) {
	oc := newOrderCase(t, false)
	oc.p.remote = true
	oc.p.sees = oc.o.ProjectDir
	oc.f.ExitOnStart(enginefake.Kind("sandbox"), 0)
	code, err, r := oc.run(t)
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, oc.stderr)
	}
	wantOrder(t, r, oc.ev, []string{"sandbox", "state", "path check", "network", "steering", "secrets", "gate", "podman"}, endEvents)
	if !strings.Contains(oc.stderr.String(), "podman is not local but sees the project at the same path (a container there read the token aisb wrote into it, and what it wrote there is here, yours") {
		t.Errorf("stderr does not say the project is shared:\n%s", oc.stderr)
	}
	if vols := oc.f.VolumeNames(); len(vols) != 0 {
		t.Errorf("volumes made: %q", vols)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "review")); err == nil {
		t.Errorf("a review session was begun")
	}
	var mounted, copied, policy bool
	for _, c := range oc.f.Calls() {
		if c.Name == sandboxName(r.id) && c.Method == enginefake.ContainerCopyIn && strings.HasPrefix(c.Arg, "/project") {
			copied = true
		}
		if c.Name == sandboxName(r.id) && c.Method == enginefake.ContainerCopyIn && c.Arg == "/" {
			policy = true
		}
	}
	if v, ok := oc.p.specs.Load(sandboxName(r.id)); ok {
		s := v.(*specgen.SpecGenerator)
		for _, m := range s.Mounts {
			mounted = mounted || (m.Source == oc.o.ProjectDir && m.Destination == "/project" && m.Type == "bind")
		}
		for _, v := range s.Volumes {
			if v.Dest == "/project" {
				t.Errorf("a volume at /project: %s", v.Name)
			}
		}
	}
	if !mounted || copied || !policy {
		t.Errorf("the sandbox: project bind-mounted %v (want true), copied %v (want false), policy copied in %v (want true)", mounted, copied, policy)
	}
	noMarkers(t, oc.o.ProjectDir)
	if _, ok := oc.f.Container(sandbox.PathCheckName(r.id)); ok {
		t.Errorf("the check's container is left")
	}
}

// TestSessionRemoteOtherDir: an engine that has a directory of the
// project's name that is not the project (its containers see another
// one, holding a marker of that name with another token) is not shared:
// the token is not in what it wrote, or what it wrote is not here. The
// project is copied, as for an engine that sees nothing.
func TestSessionRemoteOtherDir(t *testing.T) {
	for name, prepare := range map[string]func(other, marker string){
		"other token": func(other, marker string) {
			os.WriteFile(filepath.Join(other, marker), []byte("0123456789abcdef0123456789abcdef"), 0o644)
		},
		"empty": func(string, string) {},
	} {
		t.Run(name, func(t *testing.T) {
			oc := newOrderCase(t, false)
			oc.p.remote = true
			oc.p.sees = t.TempDir()
			oc.f.ExitOnStart(enginefake.Kind("sandbox"), 0)
			// The marker's name is the session's: known once the run has
			// begun, so the other directory gets one of every name it asks.
			oc.p.onCheck = func(marker string) { prepare(oc.p.sees, marker) }
			code, err, r := oc.run(t)
			if err != nil || code != 0 {
				t.Fatalf("exit %d, %v\n%s", code, err, oc.stderr)
			}
			if !strings.Contains(oc.stderr.String(), "it is another directory of that name): this is a review session") {
				t.Errorf("stderr does not say the path is another directory there:\n%s", oc.stderr)
			}
			if ok, _ := oc.f.VolumeExists(context.Background(), ProjectVolume(r.id)); ok {
				t.Errorf("the project's volume is left")
			}
			noMarkers(t, oc.o.ProjectDir)
		})
	}
}

func noMarkers(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".aisb-pathcheck") {
			t.Errorf("left in the project: %s", e.Name())
		}
	}
}

// TestSessionRemotePathCheckLeft: when the check's own removal of its
// container fails (or comes before a create the engine finished late, as
// under load), the session's end removes it: nothing of the session stays
// on the engine.
func TestSessionRemotePathCheckLeft(t *testing.T) {
	for name, shared := range map[string]bool{"shared": true, "copied": false} {
		t.Run(name, func(t *testing.T) {
			oc := newOrderCase(t, false)
			oc.p.remote = true
			if shared {
				oc.p.sees = oc.o.ProjectDir
			}
			oc.f.ExitOnStart(enginefake.Kind("sandbox"), 0)
			oc.f.FailTimes(enginefake.ContainerRemove, enginefake.Kind("pathcheck"), errors.New("container is locked"), 1)
			code, err, r := oc.run(t)
			if err != nil || code != 0 {
				t.Fatalf("exit %d, %v\n%s", code, err, oc.stderr)
			}
			if _, ok := oc.f.Container(sandbox.PathCheckName(r.id)); ok {
				t.Errorf("the check's container is left after its removal failed once")
			}
			removes := 0
			for _, c := range oc.f.Calls() {
				if c.Name == sandbox.PathCheckName(r.id) && c.Method == enginefake.ContainerRemove {
					removes++
				}
			}
			if removes < 2 {
				t.Errorf("control: the check's container was removed %d times, want the check's failed removal and the end's", removes)
			}
		})
	}
}
