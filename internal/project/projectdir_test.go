package project

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCheck(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home", "u")
	proj := filepath.Join(home, "src", "proj")
	os.MkdirAll(proj, 0o755)
	os.MkdirAll(filepath.Join(home, ".config"), 0o755)
	os.MkdirAll(filepath.Join(root, "run"), 0o755)
	os.Symlink(home, filepath.Join(root, "homelink"))
	os.Symlink(proj, filepath.Join(root, "projlink"))
	p := Protected{
		Homes: []string{home},
		Dirs: []Guarded{
			{filepath.Join(home, ".config", "aisb"), "aisb's configuration"}, // does not exist yet
			{filepath.Join(root, "run", "user"), "your runtime directory"},
		},
	}
	for _, dir := range []string{"/", home, filepath.Join(root, "home"), root, filepath.Join(home, ".config"), filepath.Join(root, "homelink"), filepath.Join(root, "run")} {
		if _, err := Check(dir, p); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused", dir, err)
		}
	}
	for dir, want := range map[string]string{proj: proj, filepath.Join(root, "projlink"): proj, filepath.Join(home, "src"): filepath.Join(home, "src")} {
		if got, err := Check(dir, p); err != nil || got != want {
			t.Errorf("%s: %q %v, want %s", dir, got, err, want)
		}
	}
	var re *RefusedError
	if _, err := Check(home, p); !errors.As(err, &re) || re.Dir != home {
		t.Errorf("home: %v", err)
	}
}
