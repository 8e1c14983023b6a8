package statevol

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/engine/enginefake"
)

// countingEngine counts what the service's archive copies hand over.
type countingEngine struct {
	*enginefake.Fake
	copied atomic.Int64
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingEngine) ContainerCopyOut(ctx context.Context, name, p string, w io.Writer) error {
	return c.Fake.ContainerCopyOut(ctx, name, p, countingWriter{w, &c.copied})
}

// sessionEnd runs a pi session against the fake whose agent changes a
// setting and writes extra bytes of chat, and returns what the session's
// end found changed, how much it copied and the copies it asked for.
func sessionEnd(t *testing.T, extra int) ([]string, int64, []string) {
	t.Helper()
	f := enginefake.New()
	c := &countingEngine{Fake: f}
	s, err := Open(c, Target{Harness: pi(t), Scope: config.StateHarness}, t.TempDir(), "localhost/aisb-sandbox-pi:1")
	if err != nil {
		t.Fatal(err)
	}
	box := specgen.NewSpecGenerator("localhost/aisb-sandbox-pi:1", false)
	box.Name = "aisb-s1"
	box.Labels = map[string]string{engine.LabelKind: "sandbox"}
	box.Volumes = s.Mounts()
	if _, err := f.ContainerCreate(context.Background(), box); err != nil {
		t.Fatal(err)
	}
	for p, content := range map[string][]byte{
		"/.pi/agent/settings.json":           []byte(`{"x":1}`),
		"/.pi/agent/extensions/e.ts":         []byte("export {}"),
		"/.pi/agent/sessions/chat.jsonl":     bytes.Repeat([]byte("c"), extra),
		"/.pi/agent/sessions/old/chat.jsonl": []byte("short"),
	} {
		if err := f.WriteFile(box.Name, Home+p, content); err != nil {
			t.Fatal(err)
		}
	}
	c.copied.Store(0)
	mark := len(f.Log())
	changed, err := s.Close()
	if err != nil {
		t.Fatal(err)
	}
	var copies []string
	for _, l := range f.Log()[mark:] {
		if strings.HasPrefix(l, string(enginefake.ContainerCopyOut)) {
			copies = append(copies, l[strings.LastIndex(l, " ")+1:])
		}
	}
	return changed, c.copied.Load(), copies
}

// TestSessionEndBoundedBySettings: a volume holding far more than its
// settings (here 48 MiB of chat; a sparse 20 GiB file made the end of a
// real session take 165 s) costs the session's end the budget's read and
// the settings paths' copies, not the volume; what changed is found the
// same. Before this test the end copied the whole volume (48 MiB).
func TestSessionEndBoundedBySettings(t *testing.T) {
	changed, copied, copies := sessionEnd(t, 48<<20)
	want := []string{".pi/agent/extensions/e.ts", ".pi/agent/settings.json"}
	if !slices.Equal(changed, want) {
		t.Errorf("changed %q, want %q", changed, want)
	}
	if copied > 40<<20 {
		t.Errorf("the session's end copied %d MiB of the volume, want at most the budget (%d MiB) and the settings", copied>>20, wholeBudget>>20)
	}
	if len(copies) < 2 || copies[0] != ioMount+"/." || !slices.Contains(copies, ioMount+"/.pi/agent/settings.json") || !slices.Contains(copies, ioMount+"/.pi/agent/extensions/.") {
		t.Errorf("copies %q: want the whole volume, stopped, then the settings paths", copies)
	}
	// The control: a small volume is copied whole, in one request, and
	// finds the same.
	changed, _, copies = sessionEnd(t, 1000)
	if !slices.Equal(changed, want) || !slices.Equal(copies, []string{ioMount + "/."}) {
		t.Errorf("small volume: changed %q, copies %q", changed, copies)
	}
}
