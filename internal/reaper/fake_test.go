package reaper

import (
	"context"
	"slices"
	"testing"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/engine/enginefake"
	"github.com/aisb-dev/aisb/internal/state"
)

// TestReapAgainstTheFake: what a gone aisb left is removed; what a live
// one owns, or a live finisher finishes, and what no aisb owns, stay.
func TestReapAgainstTheFake(t *testing.T) {
	f := enginefake.New()
	gone := "999999999:1" // no such process
	for name, labels := range map[string]map[string]string{
		"aisb-gone":     {engine.LabelKind: "sandbox", engine.LabelOwner: gone},
		"aisb-live":     {engine.LabelKind: "sandbox", engine.LabelOwner: state.Owner()},
		"aisb-finished": {engine.LabelKind: "gate", engine.LabelOwner: gone, engine.LabelFinisher: state.Owner()},
		"aisb-longlive": {engine.LabelKind: "gate"},
	} {
		s := specgen.NewSpecGenerator("localhost/img", false)
		s.Name, s.Labels = name, labels
		if _, err := f.ContainerCreate(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	Reap(f, t.Logf)
	if got, want := f.ContainerNames(), []string{"aisb-finished", "aisb-live", "aisb-longlive"}; !slices.Equal(got, want) {
		t.Errorf("after the reap: %q, want %q", got, want)
	}
}
