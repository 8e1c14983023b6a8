package image

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
)

// file is an input file holding content, as Digest reads it.
func file(content string) File {
	return File{Path: "/nonexistent", Size: int64(len(content)), Sum: sha256.Sum256([]byte(content))}
}

func spec() Spec {
	return Spec{Name: "aisb-x", Containerfile: []byte("FROM x"),
		Files:     map[string]File{"a": file("1"), "b": file("2"), "c": file("3")},
		BaseImage: "b", Args: map[string]string{"K": "v", "L": "w", "M": "x"}}
}

// TestTag: the same inputs give the same tag; any change to any input gives
// another, so a changed input always rebuilds and an unchanged one never does.
func TestTag(t *testing.T) {
	base := spec()
	want := base.Tag("id")
	if !regexp.MustCompile(`^localhost/aisb-x:[0-9a-f]{16}$`).MatchString(want) {
		t.Fatalf("tag %q", want)
	}
	// Specs built apart, with maps filled in another order, hash the same:
	// the tag must not depend on map iteration order.
	for i := 0; i < 20; i++ {
		other := Spec{Name: "aisb-x", Containerfile: []byte("FROM x"), Files: map[string]File{}, BaseImage: "b", Args: map[string]string{}}
		for _, k := range []string{"c", "a", "b"} {
			other.Files[k] = base.Files[k]
		}
		for _, k := range []string{"M", "K", "L"} {
			other.Args[k] = base.Args[k]
		}
		if got := other.Tag("id"); got != want {
			t.Fatalf("same inputs, different tags: %s and %s", got, want)
		}
	}
	variants := map[string]func(*Spec){
		"containerfile":       func(s *Spec) { s.Containerfile = []byte("FROM y") },
		"file content":        func(s *Spec) { s.Files["a"] = file("9") },
		"file name":           func(s *Spec) { s.Files["d"] = s.Files["a"]; delete(s.Files, "a") },
		"arg":                 func(s *Spec) { s.Args["K"] = "z" },
		"arg moved to a file": func(s *Spec) { delete(s.Args, "K"); s.Files["K"] = file("v") },
	}
	for name, change := range variants {
		s := spec()
		change(&s)
		if s.Tag("id") == want {
			t.Errorf("changing the %s keeps the tag", name)
		}
	}
	if base.Tag("id2") == want {
		t.Error("changing the base image ID keeps the tag")
	}
	// Hashed ahead of the base image's ID, the tag is the same, and it
	// stays what it is (a change of the formula rebuilds every image once).
	if got := base.Hash().Tag("id"); got != want || want != "localhost/aisb-x:2ea93f477fdf027d" {
		t.Errorf("Hash().Tag = %s, Tag = %s, want localhost/aisb-x:2ea93f477fdf027d", got, want)
	}
	h := base.Hash()
	if h.Tag("id") != h.Tag("id") || h.Tag("id2") == want {
		t.Error("a Hashed's tag changes between calls or ignores the base image's ID")
	}
}

func TestLockRefusesNoDirectory(t *testing.T) {
	if _, err := lock("", "x"); err == nil {
		t.Error("a lock without a directory was taken (it would fall back to a shared one)")
	}
	dir := t.TempDir()
	unlock, err := lock(filepath.Join(dir, "aisb"), "x")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

// TestContextModesIgnoreUmask: the build context's modes are 0755 for an
// executable and 0644 for the rest under a umask of 077 too (the image keeps
// them; the tag does not say them).
func TestContextModesIgnoreUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	src := t.TempDir()
	s := Spec{Name: "aisb-x", Containerfile: []byte("FROM x"), Files: map[string]File{}}
	for name, content := range map[string]string{"tool": "\x7fELF and more", "data": "text"} {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := Digest(p, "")
		if err != nil {
			t.Fatal(err)
		}
		s.Files[name] = f
	}
	if err := writeContext(dir, s); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"Containerfile": 0o644, "tool": 0o755, "data": 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", name, fi.Mode().Perm(), err, want)
		}
	}
}
