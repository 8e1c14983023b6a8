package registry

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/state"
)

func TestRegistry(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "running")
	if _, err := Find(dir, ""); !errors.Is(err, ErrNoSession) {
		t.Errorf("empty registry: %v", err)
	}
	me := Entry{ID: "20261130-180000-aaaaaa", Project: "/p", Mode: "allow", Started: time.Now(), Owner: state.Owner()}
	if err := Write(dir, me); err != nil {
		t.Fatal(err)
	}
	dead := Entry{ID: "20261130-180000-bbbbbb", Owner: "1:1"} // pid 1 never started at tick 1
	if err := Write(dir, dead); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("registry mode %o", fi.Mode().Perm())
	}
	e, err := Find(dir, "")
	if err != nil || e.ID != me.ID {
		t.Fatalf("find the only live one: %+v %v", e, err)
	}
	if _, err := os.Stat(Path(dir, dead.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Error("a dead owner's entry was kept")
	}
	other := me
	other.ID = "20261130-180000-cccccc"
	Write(dir, other)
	var amb *AmbiguousError
	if _, err := Find(dir, ""); !errors.As(err, &amb) || len(amb.IDs) != 2 {
		t.Errorf("two sessions: %v", err)
	}
	if e, err := Find(dir, other.ID); err != nil || e.ID != other.ID {
		t.Errorf("find by id: %v", err)
	}
	// A symlinked or misnamed entry is not read.
	os.Symlink(Path(dir, me.ID), Path(dir, "20261130-180000-dddddd"))
	os.WriteFile(Path(dir, "20261130-180000-eeeeee"), []byte(`{"id":"20261130-180000-aaaaaa"}`), 0o600)
	list, _ := List(dir)
	if len(list) != 2 {
		t.Errorf("list: %+v", list)
	}
	Remove(dir, other.ID)
	if _, err := Find(dir, other.ID); !errors.Is(err, ErrNoSession) {
		t.Errorf("removed entry still found: %v", err)
	}
}

func TestRegistryDirRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "running")
	os.Symlink(t.TempDir(), dir)
	if err := Write(dir, Entry{ID: "x1", Owner: state.Owner()}); !errors.Is(err, ErrUnsafe) {
		t.Errorf("symlinked registry: %v", err)
	}
	os.Remove(dir)
	os.Mkdir(dir, 0o755)
	if _, err := List(dir); !errors.Is(err, ErrUnsafe) {
		t.Errorf("registry open to others: %v", err)
	}
}
