package statevol

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/engine/enginefake"
)

// TestSessionAgainstTheFake: a session's state volume from its creation
// to its removal, the settings the agent changed seen at the end.
func TestSessionAgainstTheFake(t *testing.T) {
	f := enginefake.New()
	ctx := context.Background()
	recordDir := t.TempDir()
	target := Target{Harness: pi(t), Scope: config.StateHarness}
	s, err := Open(f, target, recordDir, "localhost/aisb-sandbox-pi:1")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.VolumeNames(); !slices.Equal(got, []string{"aisb-state-pi"}) || s.Name() != "aisb-state-pi" {
		t.Fatalf("volumes %q, session's %s", got, s.Name())
	}
	if names := f.ContainerNames(); len(names) != 0 {
		t.Errorf("io containers left behind: %q", names)
	}

	// The agent, in its sandbox, changes a setting.
	box := specgen.NewSpecGenerator("localhost/aisb-sandbox-pi:1", false)
	box.Name = "aisb-s1"
	box.Labels = map[string]string{engine.LabelKind: "sandbox"}
	box.Volumes = s.Mounts()
	if _, err := f.ContainerCreate(ctx, box); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile(box.Name, Home+"/.pi/agent/settings.json", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	changed, err := s.Close()
	if err != nil || !slices.Equal(changed, []string{".pi/agent/settings.json"}) {
		t.Fatalf("changed %q, %v", changed, err)
	}

	list, err := List(f, recordDir)
	if err != nil || len(list) != 1 || list[0].Name != "aisb-state-pi" || list[0].Unknown || list[0].Size == 0 {
		t.Fatalf("list %+v, %v", list, err)
	}
	for _, here := range []bool{true, false} {
		if err := Remove(f, recordDir, "aisb-state-pi", here); !errors.Is(err, ErrInUse) {
			t.Fatalf("removed the volume of a sandbox that has not exited (owners here: %v): %v", here, err)
		}
	}
	f.ContainerStart(ctx, box.Name)
	f.Exit(box.Name, 0)
	// On an engine that is not local an exited sandbox's aisb is not one
	// this host can judge: its sandbox is waited for, then refused.
	start := time.Now()
	if err := Remove(f, recordDir, "aisb-state-pi", false); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "podman rm "+box.Name) {
		t.Fatalf("remote: removed the volume of an exited sandbox that is still there: %v", err)
	}
	if took := time.Since(start); took < ownerExit {
		t.Errorf("remote: refused after %v, before the %v its aisb has to remove the sandbox", took, ownerExit)
	}
	if got := f.VolumeNames(); len(got) != 1 {
		t.Fatalf("volumes after the refused remove: %q", got)
	}
	if err := Remove(f, recordDir, "aisb-state-pi", true); err != nil {
		t.Fatal(err)
	}
	if got := f.VolumeNames(); len(got) != 0 {
		t.Errorf("volumes after the remove: %q", got)
	}
}
