package live

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/state"
)

func TestRegistry(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "running")
	if _, err := FindSession(dir, ""); !errors.Is(err, ErrNoSession) {
		t.Errorf("empty registry: %v", err)
	}
	me := Entry{ID: "20261130-180000-aaaaaa", Project: "/p", Mode: "allow", Started: time.Now(), Owner: state.Owner()}
	if err := Register(dir, me); err != nil {
		t.Fatal(err)
	}
	dead := Entry{ID: "20261130-180000-bbbbbb", Owner: "1:1"} // pid 1 never started at tick 1
	if err := Register(dir, dead); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("registry mode %o", fi.Mode().Perm())
	}
	e, err := FindSession(dir, "")
	if err != nil || e.ID != me.ID {
		t.Fatalf("find the only live one: %+v %v", e, err)
	}
	if _, err := os.Stat(EntryPath(dir, dead.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Error("a dead owner's entry was kept")
	}
	other := me
	other.ID = "20261130-180000-cccccc"
	Register(dir, other)
	var amb *AmbiguousError
	if _, err := FindSession(dir, ""); !errors.As(err, &amb) || len(amb.IDs) != 2 {
		t.Errorf("two sessions: %v", err)
	}
	if e, err := FindSession(dir, other.ID); err != nil || e.ID != other.ID {
		t.Errorf("find by id: %v", err)
	}
	// A symlinked or misnamed entry is not read.
	os.Symlink(EntryPath(dir, me.ID), EntryPath(dir, "20261130-180000-dddddd"))
	os.WriteFile(EntryPath(dir, "20261130-180000-eeeeee"), []byte(`{"id":"20261130-180000-aaaaaa"}`), 0o600)
	list, _ := Sessions(dir)
	if len(list) != 2 {
		t.Errorf("list: %+v", list)
	}
	Unregister(dir, other.ID)
	if _, err := FindSession(dir, other.ID); !errors.Is(err, ErrNoSession) {
		t.Errorf("removed entry still found: %v", err)
	}
}

func TestRegistryDirRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "running")
	os.Symlink(t.TempDir(), dir)
	if err := Register(dir, Entry{ID: "x1", Owner: state.Owner()}); !errors.Is(err, ErrUnsafe) {
		t.Errorf("symlinked registry: %v", err)
	}
	os.Remove(dir)
	os.Mkdir(dir, 0o755)
	if _, err := Sessions(dir); !errors.Is(err, ErrUnsafe) {
		t.Errorf("registry open to others: %v", err)
	}
}
