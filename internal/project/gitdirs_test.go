package project

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func TestFindWorktree(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	main := filepath.Join(root, "main")
	os.Mkdir(main, 0o755)
	git(t, main, "init", "-q")
	os.WriteFile(filepath.Join(main, "f"), []byte("x"), 0o644)
	git(t, main, "add", "f")
	git(t, main, "commit", "-qm", "one")
	wt := filepath.Join(root, "wt")
	git(t, main, "worktree", "add", "-q", "-b", "feature", wt)

	got, err := GitDirs(wt)
	if err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(main, ".git")
	want := []GitMount{
		{Source: c, Dest: c, ReadOnly: true},
		{Source: c + "/objects", Dest: c + "/objects"},
		{Source: c + "/refs", Dest: c + "/refs"},
		{Source: c + "/logs", Dest: c + "/logs"},
		{Source: c + "/worktrees/wt", Dest: c + "/worktrees/wt"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("mounts\n%+v\nwant\n%+v", got, want)
	}

	// A plain repository and a directory without git need nothing.
	for _, d := range []string{main, root} {
		if ms, err := GitDirs(d); err != nil || len(ms) != 0 {
			t.Errorf("GitDirs(%s) = %v, %v", d, ms, err)
		}
	}
}

func TestFindRelativeAndRefusals(t *testing.T) {
	root := t.TempDir()
	// A submodule-style git dir named relatively: mounted where the relative
	// path leads from /project.
	gd := filepath.Join(root, "super", ".git", "modules", "sub")
	os.MkdirAll(filepath.Join(gd, "hooks"), 0o755)
	os.MkdirAll(filepath.Join(gd, "objects"), 0o755)
	os.MkdirAll(filepath.Join(gd, "refs"), 0o755)
	os.WriteFile(filepath.Join(gd, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.WriteFile(filepath.Join(gd, "config"), []byte("[core]\n\tworktree = ../../../sub\n"), 0o644)
	proj := filepath.Join(root, "super", "sub")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, ".git"), []byte("gitdir: ../.git/modules/sub\n"), 0o644)
	got, err := GitDirs(proj)
	if err != nil {
		t.Fatal(err)
	}
	want := []GitMount{
		{Source: gd, Dest: "/.git/modules/sub"},
		{Source: gd + "/hooks", Dest: "/.git/modules/sub/hooks", ReadOnly: true},
		{Source: gd + "/config", Dest: "/.git/modules/sub/config", ReadOnly: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("mounts\n%+v\nwant\n%+v", got, want)
	}

	for name, content := range map[string]string{
		"no gitdir line": "hello\n",
		"missing target": "gitdir: " + filepath.Join(root, "nowhere") + "\n",
		"system dir":     "gitdir: ../../../../../../../../../usr/share\n",
	} {
		os.WriteFile(filepath.Join(proj, ".git"), []byte(content), 0o644)
		if _, err := GitDirs(proj); !errors.Is(err, ErrGitFile) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

// TestFindRefusesForeignDirectories: the .git file is written by whoever
// controls the project, the sandboxed agent included; it must not make aisb
// mount a directory that is not this project's own git directory (a home
// directory, ~/.ssh, /), and neither may a worktree's commondir or gitdir
// file, which the agent can write in a worktree session.
func TestFindRefusesForeignDirectories(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	home := filepath.Join(root, "home")
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte("secret"), 0o600)
	proj := filepath.Join(root, "proj")
	os.MkdirAll(proj, 0o755)
	dotgit := filepath.Join(proj, ".git")

	// A plain directory, the root, and a directory dressed as a git
	// directory (HEAD, objects, refs) that does not point back.
	os.WriteFile(filepath.Join(home, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.MkdirAll(filepath.Join(home, "objects"), 0o755)
	os.MkdirAll(filepath.Join(home, "refs"), 0o755)
	for _, target := range []string{home, filepath.Join(home, ".ssh"), "/", "../home"} {
		os.WriteFile(dotgit, []byte("gitdir: "+target+"\n"), 0o644)
		if ms, err := GitDirs(proj); !errors.Is(err, ErrGitFile) {
			t.Errorf("gitdir: %s: mounts %+v, err %v; want ErrGitFile", target, ms, err)
		}
	}

	// A real worktree whose git directory the agent rewrote (it is mounted
	// writable): commondir aimed at the home directory.
	main := filepath.Join(root, "main")
	os.Mkdir(main, 0o755)
	git(t, main, "init", "-q")
	os.WriteFile(filepath.Join(main, "f"), []byte("x"), 0o644)
	git(t, main, "add", "f")
	git(t, main, "commit", "-qm", "one")
	wt := filepath.Join(root, "wt")
	git(t, main, "worktree", "add", "-q", "-b", "feature", wt)
	wtGit := filepath.Join(main, ".git", "worktrees", "wt")
	os.WriteFile(filepath.Join(wtGit, "commondir"), []byte(home+"\n"), 0o644)
	if ms, err := GitDirs(wt); !errors.Is(err, ErrGitFile) {
		t.Errorf("commondir aimed at a home directory: mounts %+v, err %v; want ErrGitFile", ms, err)
	}
	os.WriteFile(filepath.Join(wtGit, "commondir"), []byte("../..\n"), 0o644)
	if _, err := GitDirs(wt); err != nil {
		t.Fatalf("the restored worktree: %v", err)
	}

	// Another project's .git file naming this worktree's git directory: the
	// git directory's gitdir file names wt, not proj.
	os.WriteFile(dotgit, []byte("gitdir: "+wtGit+"\n"), 0o644)
	if ms, err := GitDirs(proj); !errors.Is(err, ErrGitFile) {
		t.Errorf("a worktree git directory that is not proj's: mounts %+v, err %v; want ErrGitFile", ms, err)
	}

	// A symlink in the writable objects directory leading to the home
	// directory, named as the git directory.
	link := filepath.Join(main, ".git", "objects", "evil")
	os.Symlink(home, link)
	os.WriteFile(dotgit, []byte("gitdir: "+link+"\n"), 0o644)
	if ms, err := GitDirs(proj); !errors.Is(err, ErrGitFile) {
		t.Errorf("a symlink to a home directory: mounts %+v, err %v; want ErrGitFile", ms, err)
	}
}

// TestFindSubmodule: a real submodule's git directory (git's own layout,
// core.worktree pointing back) is found.
func TestFindSubmodule(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	lib := filepath.Join(root, "lib")
	os.Mkdir(lib, 0o755)
	git(t, lib, "init", "-q")
	os.WriteFile(filepath.Join(lib, "f"), []byte("x"), 0o644)
	git(t, lib, "add", "f")
	git(t, lib, "commit", "-qm", "one")
	super := filepath.Join(root, "super")
	os.Mkdir(super, 0o755)
	git(t, super, "init", "-q")
	git(t, super, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "sub")
	got, err := GitDirs(filepath.Join(super, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	gd := filepath.Join(super, ".git", "modules", "sub")
	if len(got) == 0 || got[0].Source != gd || got[0].Dest != "/.git/modules/sub" || got[0].ReadOnly {
		t.Errorf("mounts %+v; want %s at /.git/modules/sub writable first", got, gd)
	}
}
