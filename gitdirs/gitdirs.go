// Package gitdirs finds the git directories outside the project that a
// project's .git file (a git worktree, a submodule) points to, and how to
// mount them so git works inside the sandbox with as little writable as git
// allows.
package gitdirs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ProjectInContainer is where the project appears in the sandbox.
const ProjectInContainer = "/project"

// Mount is one directory to bind into the sandbox.
type Mount struct {
	Source   string // on the host
	Dest     string // in the sandbox
	ReadOnly bool
}

// ErrGitFile wraps every problem with a project's .git file.
var ErrGitFile = errors.New("the project's .git file")

// systemDirs are never mount points for a git directory.
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr", ProjectInContainer}

// Find returns the mounts git needs when projectDir/.git is a file; none
// when it is a directory or absent. For a worktree, whose .git names
// COMMON/worktrees/NAME: the worktree's own git directory writable, the
// common directory read-only (its config, hooks, HEAD and index stay as the
// user left them) with objects, refs and logs writable, which a commit needs.
// For a submodule (no commondir): its git directory writable except hooks
// and config. Each is mounted where the .git file's path leads inside the
// sandbox: at the same absolute path, or relative to /project.
func Find(projectDir string) ([]Mount, error) {
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
	b, err := os.ReadFile(dotgit)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGitFile, err)
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
	var mounts []Mount
	common, err := os.ReadFile(filepath.Join(gitHost, "commondir"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		mounts = append(mounts, Mount{Source: gitHost, Dest: gitDest})
		mounts = appendExisting(mounts, gitHost, gitDest, true, "hooks", "config")
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrGitFile, err)
	default:
		commonHost, commonDest := locate(gitHost, gitDest, strings.TrimSpace(string(common)))
		if st, err := os.Stat(commonHost); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%w: the worktree's common git directory %s is not a directory", ErrGitFile, commonHost)
		}
		if !inside(commonDest, ProjectInContainer) {
			mounts = append(mounts, Mount{Source: commonHost, Dest: commonDest, ReadOnly: true})
			mounts = appendExisting(mounts, commonHost, commonDest, false, "objects", "refs", "logs")
		}
		mounts = append(mounts, Mount{Source: gitHost, Dest: gitDest})
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

func appendExisting(ms []Mount, host, dest string, ro bool, names ...string) []Mount {
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(host, n)); err == nil {
			ms = append(ms, Mount{Source: filepath.Join(host, n), Dest: filepath.Join(dest, n), ReadOnly: ro})
		}
	}
	return ms
}

func inside(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
