package gitdirs

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

	got, err := Find(wt)
	if err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(main, ".git")
	want := []Mount{
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
		if ms, err := Find(d); err != nil || len(ms) != 0 {
			t.Errorf("Find(%s) = %v, %v", d, ms, err)
		}
	}
}

func TestFindRelativeAndRefusals(t *testing.T) {
	root := t.TempDir()
	// A submodule-style git dir named relatively: mounted where the relative
	// path leads from /project.
	gd := filepath.Join(root, "super", ".git", "modules", "sub")
	os.MkdirAll(filepath.Join(gd, "hooks"), 0o755)
	os.WriteFile(filepath.Join(gd, "config"), nil, 0o644)
	proj := filepath.Join(root, "super", "sub")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, ".git"), []byte("gitdir: ../.git/modules/sub\n"), 0o644)
	got, err := Find(proj)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
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
		if _, err := Find(proj); !errors.Is(err, ErrGitFile) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}
