package project

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// entries reads an archive: each entry's name, type and owner.
type entry struct {
	typ      byte
	uid, gid int
	link     string
	content  string
}

func readArchive(t *testing.T, b []byte) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(tr)
		if _, dup := out[h.Name]; dup {
			t.Errorf("entry %s twice", h.Name)
		}
		out[h.Name] = entry{typ: h.Typeflag, uid: h.Uid, gid: h.Gid, link: h.Linkname, content: string(c)}
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestArchiveHonoursGitignore: in a git work tree the archive holds what
// git does not ignore (tracked or not), the .git directory, and links as
// links, each parent directory once and first, all owned by the ids asked
// for; what .gitignore lists is not there.
func TestArchiveHonoursGitignore(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	if out, err := exec.Command("git", "-C", dir, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	write(t, dir, ".gitignore", "node_modules/\n*.log\n")
	write(t, dir, "src/main.go", "package main\n")
	write(t, dir, "untracked.txt", "new\n")
	write(t, dir, "node_modules/big/x.js", "ignored\n")
	write(t, dir, "debug.log", "ignored\n")
	if err := os.Symlink("src/main.go", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	st, err := Archive(context.Background(), dir, &b, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	got := readArchive(t, b.Bytes())
	for _, name := range []string{".gitignore", "src/", "src/main.go", "untracked.txt", "link", ".git/", ".git/HEAD"} {
		if _, ok := got[name]; !ok {
			t.Errorf("the archive lacks %s: %q", name, slices.Sorted(maps.Keys(got)))
		}
	}
	for _, name := range []string{"node_modules/", "node_modules/big/x.js", "debug.log"} {
		if _, ok := got[name]; ok {
			t.Errorf("the archive holds %s, which git ignores", name)
		}
	}
	if e := got["link"]; e.typ != tar.TypeSymlink || e.link != "src/main.go" {
		t.Errorf("link: %+v, want a symbolic link to src/main.go", e)
	}
	if e := got["src/main.go"]; e.content != "package main\n" {
		t.Errorf("src/main.go: %q", e.content)
	}
	for name, e := range got {
		if e.uid != 1000 || e.gid != 1000 {
			t.Errorf("%s is %d:%d, want 1000:1000", name, e.uid, e.gid)
		}
	}
	if !st.Ignored || st.Files < 3 || st.Links != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestArchiveWithoutGit: outside git everything goes; a fifo never does.
func TestArchiveWithoutGit(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a/b.txt", "b\n")
	write(t, dir, "debug.log", "kept\n")
	write(t, dir, ".gitignore", "*.log\n")
	fifo := filepath.Join(dir, "pipe")
	if err := mkfifo(fifo); err != nil {
		t.Skip(err)
	}
	// GIT_CEILING_DIRECTORIES keeps git from finding a work tree above
	// the temporary directory.
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(dir))
	var b bytes.Buffer
	st, err := Archive(context.Background(), dir, &b, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	got := readArchive(t, b.Bytes())
	for _, name := range []string{"a/", "a/b.txt", "debug.log", ".gitignore"} {
		if _, ok := got[name]; !ok {
			t.Errorf("the archive lacks %s: %q", name, slices.Sorted(maps.Keys(got)))
		}
	}
	if _, ok := got["pipe"]; ok {
		t.Error("the archive holds a fifo")
	}
	if st.Ignored {
		t.Error("git's rules applied outside git")
	}
}

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }
