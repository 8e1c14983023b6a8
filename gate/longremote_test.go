package gate

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordEngine: a long-lived gate's record names the engine that is
// not local it runs on, and a command reaching another engine (the local
// one, or another remote one) is refused with ErrOtherEngine, naming both
// and the fix; the same engine is accepted.
func TestRecordEngine(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	uri := "unix:///run/aisb-engine/x.sock"
	if err := WriteRecord(dir, Record{Port: 4000, Token: strings.Repeat("ab", 16), Engine: uri}); err != nil {
		t.Fatal(err)
	}
	rec, err := ReadRecord(dir)
	if err != nil || rec.Engine != uri {
		t.Fatalf("read back %+v, %v", rec, err)
	}
	if err := checkEngine("shared", rec, uri); err != nil {
		t.Errorf("the gate's own engine was refused: %v", err)
	}
	for _, where := range []string{"", "ssh://u@h/run/user/1/podman/podman.sock"} {
		err := checkEngine("shared", rec, where)
		if !errors.Is(err, ErrOtherEngine) || !strings.Contains(err.Error(), "it was started on "+uri) || !strings.Contains(err.Error(), "set CONTAINER_HOST to where it runs") {
			t.Errorf("reached from %q: %v", where, err)
		}
	}
	// A local gate's record (no engine) is refused from a remote engine.
	local := Record{Port: 4000, Token: strings.Repeat("ab", 16)}
	if err := checkEngine("shared", local, uri); !errors.Is(err, ErrOtherEngine) || !strings.Contains(err.Error(), "started on your local podman") {
		t.Errorf("a local gate reached from %s: %v", uri, err)
	}
	if err := checkEngine("shared", local, ""); err != nil {
		t.Errorf("a local gate reached locally: %v", err)
	}
}
