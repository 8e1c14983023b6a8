// Package gitdirs finds the git directories outside the project that a
// project's .git file (a git worktree, a submodule) points to, and how to
// mount them so git works inside the sandbox with as little writable as git
// allows.
package project

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aisb-dev/aisb/internal/safefile"
)

// The files GitDirs reads are written by whoever controls the project, the
// agent included (a worktree's git directory is writable in the sandbox):
// each is read with safefile (no link followed, no FIFO, a cap).
const (
	maxPathFile   = 8 << 10 // .git, commondir, gitdir: one path each
	maxConfigFile = 1 << 20 // a submodule's config
)

// ProjectInContainer is where the project appears in the sandbox.
const ProjectInContainer = "/project"

// GitMount is one directory to bind into the sandbox.
type GitMount struct {
	Source   string // on the host
	Dest     string // in the sandbox
	ReadOnly bool
}

// ErrGitFile wraps every problem with a project's .git file.
var ErrGitFile = errors.New("the project's .git file")

// systemDirs are never mount points for a git directory.
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr", ProjectInContainer}

// GitDirs returns the mounts git needs when projectDir/.git is a file; none
// when it is a directory or absent. For a worktree, whose .git names
// COMMON/worktrees/NAME: the worktree's own git directory writable, the
// common directory read-only (its config, hooks, HEAD and index stay as the
// user left them) with objects, refs and logs writable, which a commit needs.
// For a submodule (no commondir): its git directory writable except hooks
// and config. Each is mounted where the .git file's path leads inside the
// sandbox: at the same absolute path, or relative to /project.
func GitDirs(projectDir string) ([]GitMount, error) {
	dotgit := filepath.Join(projectDir, ".git")
	fi, err := os.Lstat(dotgit)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.IsDir()) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGitFile, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is neither a directory nor a file; aisb cannot mount what it points to", ErrGitFile, dotgit)
	}
	b, err := safefile.Read(dotgit, maxPathFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGitFile, err)
	}
	target, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok || target == "" || strings.ContainsAny(target, "\n\x00") {
		return nil, fmt.Errorf("%w: %s does not say \"gitdir: PATH\"", ErrGitFile, dotgit)
	}
	gitHost, gitDest := locate(projectDir, ProjectInContainer, target)
	if st, err := os.Stat(gitHost); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: %s points to %s, which is not a directory; run `git worktree repair` or mount it yourself", ErrGitFile, dotgit, gitHost)
	}
	if inside(gitDest, ProjectInContainer) {
		return nil, nil // already in the sandbox with the project
	}
	// The .git file is written by whoever controls the project, the agent
	// included, and a worktree's git directory is writable in the sandbox:
	// nothing is mounted unless it is a git directory that names this
	// project as its work tree, checked on the paths with symlinks resolved,
	// and those resolved paths are what is mounted.
	realProj, err := filepath.EvalSymlinks(projectDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGitFile, err)
	}
	realGit, err := filepath.EvalSymlinks(gitHost)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGitFile, err)
	}
	var mounts []GitMount
	common, err := safefile.Read(filepath.Join(realGit, "commondir"), maxPathFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A submodule: git's own layout, and core.worktree names the project.
		if err := ownedSubmodule(realGit, realProj); err != nil {
			return nil, fmt.Errorf("%w: %s points to %q: %w; aisb mounts only a git directory that belongs to the project", ErrGitFile, dotgit, gitHost, err)
		}
		mounts = append(mounts, GitMount{Source: realGit, Dest: gitDest})
		mounts = appendExisting(mounts, realGit, gitDest, true, "hooks", "config")
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrGitFile, err)
	default:
		commonHost, commonDest := locate(realGit, gitDest, strings.TrimSpace(string(common)))
		realCommon, err := filepath.EvalSymlinks(commonHost)
		if err != nil {
			return nil, fmt.Errorf("%w: the worktree's common git directory %q: %v", ErrGitFile, commonHost, err)
		}
		if err := ownedWorktree(realGit, realCommon, realProj); err != nil {
			return nil, fmt.Errorf("%w: %s points to %q: %w; aisb mounts only a git directory that belongs to the project", ErrGitFile, dotgit, gitHost, err)
		}
		if !inside(commonDest, ProjectInContainer) {
			mounts = append(mounts, GitMount{Source: realCommon, Dest: commonDest, ReadOnly: true})
			mounts = appendExisting(mounts, realCommon, commonDest, false, "objects", "refs", "logs")
		}
		mounts = append(mounts, GitMount{Source: realGit, Dest: gitDest})
	}
	for _, m := range mounts {
		for _, d := range systemDirs {
			if d != ProjectInContainer && inside(m.Dest, d) {
				return nil, fmt.Errorf("%w: git directory %s would be mounted at %s in the sandbox, a system directory; move the repository or use a full clone", ErrGitFile, m.Source, m.Dest)
			}
		}
	}
	return mounts, nil
}

// locate resolves p as git does from dir (host) and says where the same path
// leads in the sandbox, where dir is dirDest.
func locate(dir, dirDest, p string) (host, dest string) {
	if filepath.IsAbs(p) {
		c := filepath.Clean(p)
		return c, c
	}
	return filepath.Join(dir, p), filepath.Join(dirDest, p)
}

// ownedWorktree checks, as git lays a worktree out, that gitDir is
// COMMON/worktrees/NAME, COMMON is a git directory, and gitDir's gitdir file
// names project/.git. All paths are resolved.
func ownedWorktree(gitDir, common, project string) error {
	if filepath.Dir(gitDir) != filepath.Join(common, "worktrees") {
		return fmt.Errorf("it is not in the worktrees directory of its common directory %q", common)
	}
	if err := looksLikeGitDir(common); err != nil {
		return err
	}
	b, err := safefile.Read(filepath.Join(gitDir, "gitdir"), maxPathFile)
	if err != nil {
		return fmt.Errorf("its gitdir file: %w", err)
	}
	back, err := resolveFrom(gitDir, strings.TrimSpace(string(b)))
	if err != nil || back != filepath.Join(project, ".git") {
		return errors.New("its gitdir file does not name this project")
	}
	return nil
}

// ownedSubmodule checks that gitDir is a git directory whose config's
// core.worktree is project, as git writes it for a submodule. All paths are
// resolved.
func ownedSubmodule(gitDir, project string) error {
	if err := looksLikeGitDir(gitDir); err != nil {
		return err
	}
	b, err := safefile.Read(filepath.Join(gitDir, "config"), maxConfigFile)
	if err != nil {
		return fmt.Errorf("its config: %w", err)
	}
	wt, ok := coreWorktree(string(b))
	if !ok {
		return errors.New("its config has no core.worktree")
	}
	back, err := resolveFrom(gitDir, wt)
	if err != nil || back != project {
		return errors.New("its core.worktree does not name this project")
	}
	return nil
}

// looksLikeGitDir: HEAD a file, objects and refs directories.
func looksLikeGitDir(dir string) error {
	st, err := os.Stat(filepath.Join(dir, "HEAD"))
	if err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%q is not a git directory (no HEAD)", dir)
	}
	for _, d := range []string{"objects", "refs"} {
		if st, err := os.Stat(filepath.Join(dir, d)); err != nil || !st.IsDir() {
			return fmt.Errorf("%q is not a git directory (no %s)", dir, d)
		}
	}
	return nil
}

// coreWorktree is core.worktree in a git config text, read simply: the last
// "worktree = VALUE" in a [core] section, quotes removed.
func coreWorktree(config string) (string, bool) {
	var val string
	var found, inCore bool
	for _, line := range strings.Split(config, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			inCore = strings.EqualFold(strings.TrimSpace(strings.Trim(line, "[]")), "core")
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if inCore && ok && strings.EqualFold(strings.TrimSpace(k), "worktree") {
			val, found = strings.Trim(strings.TrimSpace(v), `"`), true
		}
	}
	return val, found && val != ""
}

// resolveFrom resolves p (relative to dir unless absolute) with symlinks.
func resolveFrom(dir, p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.EvalSymlinks(p)
}

func appendExisting(ms []GitMount, host, dest string, ro bool, names ...string) []GitMount {
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(host, n)); err == nil {
			ms = append(ms, GitMount{Source: filepath.Join(host, n), Dest: filepath.Join(dest, n), ReadOnly: ro})
		}
	}
	return ms
}

func inside(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
