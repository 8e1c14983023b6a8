package project

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/safefile"
)

// worktreeLayout lays out, as git does, a worktree wt of the repository
// main: main/.git/worktrees/wt holds commondir and gitdir. It returns wt and
// its git directory.
func worktreeLayout(t *testing.T) (wt, wtGit string) {
	t.Helper()
	root := t.TempDir()
	common := filepath.Join(root, "main", ".git")
	wtGit = filepath.Join(common, "worktrees", "wt")
	wt = filepath.Join(root, "wt")
	for _, d := range []string{filepath.Join(common, "objects"), filepath.Join(common, "refs"), wtGit, wt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(common, "HEAD"):     "ref: refs/heads/main\n",
		filepath.Join(wtGit, "HEAD"):      "ref: refs/heads/feature\n",
		filepath.Join(wtGit, "commondir"): "../..\n",
		filepath.Join(wtGit, "gitdir"):    filepath.Join(wt, ".git") + "\n",
		filepath.Join(wt, ".git"):         "gitdir: " + wtGit + "\n",
	}
	for p, s := range files {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return wt, wtGit
}

// gitDirsWithin is GitDirs(dir), failing the test if it does not return
// within 5 s (a FIFO read blocks).
func gitDirsWithin(t *testing.T, dir string) ([]GitMount, error) {
	t.Helper()
	type result struct {
		ms  []GitMount
		err error
	}
	done := make(chan result, 1)
	go func() { ms, err := GitDirs(dir); done <- result{ms, err} }()
	select {
	case r := <-done:
		return r.ms, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("GitDirs(%s) hung", dir)
		return nil, nil
	}
}

// TestGitFilesReadSafely: the worktree's commondir and gitdir files (the
// agent can write them: the worktree's git directory is mounted writable)
// and the project's own .git file are never read through a link, from a
// FIFO or past a cap. The reproduction: a FIFO at commondir hung the
// user's next aisb run; a link to /dev/zero grew aisb past 1.3 GiB (here a
// link to a regular file, so the code before the fix does not eat the
// machine: it followed the link and succeeded).
func TestGitFilesReadSafely(t *testing.T) {
	// Control: the layout as git writes it is mounted.
	wt, _ := worktreeLayout(t)
	if ms, err := gitDirsWithin(t, wt); err != nil || len(ms) == 0 {
		t.Fatalf("the worktree as git writes it: mounts %+v, err %v", ms, err)
	}

	fifo := func(p string) {
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p string) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		target := p + ".target"
		os.WriteFile(target, b, 0o644)
		os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	huge := func(p string) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// Still the same path once trimmed: only the size is wrong.
		os.WriteFile(p, append(b, strings.Repeat(" ", maxPathFile)...), 0o644)
	}
	for _, c := range []struct {
		file string // in the worktree's git directory, or "dotgit"
		do   func(string)
		want error
	}{
		{"commondir", fifo, safefile.ErrNotRegular},
		{"commondir", link, safefile.ErrSymlink},
		{"commondir", huge, safefile.ErrTooLarge},
		{"gitdir", fifo, safefile.ErrNotRegular},
		{"gitdir", link, safefile.ErrSymlink},
		{"gitdir", huge, safefile.ErrTooLarge},
		{"dotgit", huge, safefile.ErrTooLarge},
	} {
		wt, wtGit := worktreeLayout(t)
		p := filepath.Join(wtGit, c.file)
		if c.file == "dotgit" {
			p = filepath.Join(wt, ".git")
		}
		c.do(p)
		ms, err := gitDirsWithin(t, wt)
		if !errors.Is(err, c.want) || !errors.Is(err, ErrGitFile) {
			t.Errorf("%s made unsafe: mounts %+v, err %v; want ErrGitFile and %v", c.file, ms, err, c.want)
		}
	}
}

// TestSubmoduleConfigReadSafely: a submodule's config (writable by whoever
// controls the superproject) is never read from a FIFO or through a link.
func TestSubmoduleConfigReadSafely(t *testing.T) {
	root := t.TempDir()
	gd := filepath.Join(root, "super", ".git", "modules", "sub")
	os.MkdirAll(filepath.Join(gd, "objects"), 0o755)
	os.MkdirAll(filepath.Join(gd, "refs"), 0o755)
	os.WriteFile(filepath.Join(gd, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	config := filepath.Join(gd, "config")
	os.WriteFile(config, []byte("[core]\n\tworktree = ../../../sub\n"), 0o644)
	proj := filepath.Join(root, "super", "sub")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, ".git"), []byte("gitdir: ../.git/modules/sub\n"), 0o644)
	// Control.
	if ms, err := gitDirsWithin(t, proj); err != nil || len(ms) == 0 {
		t.Fatalf("the submodule as git writes it: mounts %+v, err %v", ms, err)
	}
	os.Rename(config, config+".target")
	os.Symlink(config+".target", config)
	if ms, err := gitDirsWithin(t, proj); !errors.Is(err, safefile.ErrSymlink) {
		t.Errorf("config a link: mounts %+v, err %v; want ErrSymlink", ms, err)
	}
	os.Remove(config)
	syscall.Mkfifo(config, 0o644)
	if ms, err := gitDirsWithin(t, proj); !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("config a FIFO: mounts %+v, err %v; want ErrNotRegular", ms, err)
	}
}
