package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestWorktreeProject: a project that is a git worktree (its .git a file
// pointing into another repository's .git) works inside: git status and git
// commit, and the commit is on the branch at the host; the main repository's
// hooks and config stay read-only.
func TestWorktreeProject(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, "")
	root := testhost.UserDir(t)
	main := filepath.Join(root, "main")
	g := func(dir string, args ...string) string {
		t.Helper()
		return userRun(t, append([]string{"git", "-C", dir, "-c", "user.name=host", "-c", "user.email=host@test"}, args...)...)
	}
	userRun(t, "git", "init", "-q", "-b", "main", main)
	writeUserFile(t, filepath.Join(main, "README"), "main\n")
	g(main, "add", "README")
	g(main, "commit", "-qm", "on the host")
	wt := filepath.Join(root, "wt")
	g(main, "worktree", "add", "-q", "-b", "feature", wt)
	a.project = wt

	hook := filepath.Join(main, ".git", "hooks", "post-checkout")
	script := `set -e
git status --short --branch | sed 's/^/STATUS /'
echo change > change
git add change
git -c user.name=agent -c user.email=agent@test commit -qm "from the sandbox"
echo COMMITTED
if printf '#!/bin/sh\necho planted\n' > ` + hook + ` 2>/dev/null; then echo HOOK-WRITTEN; else echo HOOK-REFUSED; fi
if git config --file ` + filepath.Join(main, ".git", "config") + ` core.hooksPath /project 2>/dev/null; then echo CONFIG-WRITTEN; else echo CONFIG-REFUSED; fi
`
	r := a.run(t, "run", "--net", "none", "--harness", "shell", "--", "sh", "-c", script)
	if r.Code != 0 || !strings.Contains(r.Stdout, "STATUS ## feature") || !strings.Contains(r.Stdout, "COMMITTED") {
		t.Fatalf("git in a worktree project: %s", r)
	}
	if !strings.Contains(r.Stderr, "the project's .git points outside it") {
		t.Errorf("the extra mounts were not said: %s", r.Stderr)
	}
	if !strings.Contains(r.Stdout, "HOOK-REFUSED") || !strings.Contains(r.Stdout, "CONFIG-REFUSED") {
		t.Errorf("the main repository's hooks or config were writable: %s", r.Stdout)
	}
	if _, err := os.Stat(hook); err == nil {
		t.Errorf("a hook was planted in the main repository")
	}
	if log := g(main, "log", "--format=%s", "feature"); !strings.HasPrefix(log, "from the sandbox\non the host") {
		t.Errorf("the branch at the host: %q", log)
	}
	if st := g(wt, "status", "--short"); st != "" {
		t.Errorf("the worktree at the host is not clean after the sandbox's commit: %q", st)
	}
	// The main worktree is untouched.
	if st := g(main, "status", "--short"); st != "" {
		t.Errorf("the main worktree changed: %q", st)
	}
}
