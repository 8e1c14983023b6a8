package gate

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/engine/enginefake"
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

// TestDownRemote: gate down of a gate on an engine that is not local kills
// it and waits for it before removing it (its follower completes the copy
// of its logs in between), forgets its record; reached from another
// engine, it touches nothing.
func TestDownRemote(t *testing.T) {
	f := enginefake.New()
	dir := filepath.Join(t.TempDir(), "shared")
	uri := "ssh://u@h/run/user/1/podman/podman.sock"
	s, _ := Spec(Options{Session: "shared", Dir: dir, Image: "aisb-gate:x", Remote: &Remote{}})
	if _, err := f.ContainerCreate(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	f.ContainerStart(t.Context(), s.Name)
	if err := WriteRecord(dir, Record{Port: 4000, Token: strings.Repeat("ab", 16), Engine: uri}); err != nil {
		t.Fatal(err)
	}
	if err := Down(f, "shared", dir, ""); !errors.Is(err, ErrOtherEngine) {
		t.Fatalf("gate down from the local engine: %v", err)
	}
	if names := f.ContainerNames(); len(names) != 1 {
		t.Fatalf("the refused gate down removed the gate: %q", names)
	}
	if _, err := ReadRecord(dir); err != nil {
		t.Fatalf("the refused gate down forgot the record: %v", err)
	}
	if err := Down(f, "shared", dir, uri); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, l := range f.Log() {
		for _, m := range []string{"ContainerKill", "ContainerWait", "ContainerRemove"} {
			if strings.HasPrefix(l, m+" ") && strings.Contains(l, " "+s.Name) && !slices.Contains(order, m) {
				order = append(order, m)
			}
		}
	}
	if want := []string{"ContainerKill", "ContainerWait", "ContainerRemove"}; !slices.Equal(order, want) {
		t.Errorf("gate down's calls %q, want %q (%q)", order, want, f.Log())
	}
	if names := f.ContainerNames(); len(names) != 0 {
		t.Errorf("left %q", names)
	}
	if _, err := ReadRecord(dir); !errors.Is(err, ErrNoRecord) {
		t.Errorf("the record after gate down: %v", err)
	}
}

// TestResumeLogs: a remote gate's log stream that ended while the gate runs
// (the connection dropped) is resumed from the container's start with what
// the copy holds skipped: each line once in access.log and cache.log.
func TestResumeLogs(t *testing.T) {
	f := enginefake.New()
	dir := t.TempDir()
	s, _ := Spec(Options{Session: "resume", Dir: dir, Image: "aisb-gate:x", Remote: &Remote{}})
	f.Output(enginefake.Name(s.Name), []byte("line 1\nline 2\n"), []byte("cache 1\n"))
	if _, err := f.ContainerCreate(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	f.ContainerStart(t.Context(), s.Name)
	g, err := Running(Known{Session: "resume", Dir: dir, Port: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.FollowRemote(f); err != nil {
		t.Fatal(err)
	}
	<-g.logs.done // the fake's stream ends at once: as a dropped one would
	if !g.ResumeLogs() {
		t.Fatal("the ended stream was not resumed")
	}
	<-g.logs.done
	if !g.ResumeLogs() {
		t.Fatal("a second ended stream was not resumed")
	}
	<-g.logs.done
	// The fake's container still runs: the wait for its exit ends, and
	// the copy is closed as it is.
	g.EndRemote(100 * time.Millisecond)
	for name, want := range map[string]string{"access.log": "line 1\nline 2\n", "cache.log": "cache 1\n"} {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != want {
			t.Errorf("%s after the resumes: %q, want %q", name, b, want)
		}
	}
}
