// Package projectdir decides whether a directory may be mounted read-write
// into a sandbox: never the root, the user's home or anything above it, and
// never a directory holding aisb's own configuration, state or runtime files.
package project

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aisb-dev/aisb/internal/termsafe"
)

// ErrRefused is wrapped by every *RefusedError.
var ErrRefused = errors.New("refused as the project directory")

// RefusedError says which directory was refused and why.
type RefusedError struct {
	Dir string // as resolved, links followed
	Why string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s cannot be the project directory: %s, and the agent could rewrite whatever it mounts; "+
		"run aisb from the project's own directory, or name it with -C DIR", termsafe.Name(e.Dir), e.Why)
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// Guarded is a directory the project must not be or contain.
type Guarded struct {
	Path string
	What string // e.g. "aisb's configuration"
}

// Protected is what Check guards: the user's home directories (from $HOME
// and from the password database, when they differ) and aisb's own
// directories.
type Protected struct {
	Homes []string
	Dirs  []Guarded
}

// Check resolves dir (links followed) and returns it, or a *RefusedError
// when it is "/", a home directory or one of its ancestors, or when it is or
// contains one of the guarded directories.
func Check(dir string, p Protected) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("project directory %s: %w", termsafe.Name(dir), err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("project directory: %w", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("project directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("project directory %s: not a directory", termsafe.Name(real))
	}
	if real == "/" {
		return "", &RefusedError{Dir: real, Why: "it is the root of the file system"}
	}
	for _, h := range p.Homes {
		if h == "" {
			continue
		}
		home := resolve(h)
		switch {
		case home == real:
			return "", &RefusedError{Dir: real, Why: "it is your home directory"}
		case within(home, real):
			return "", &RefusedError{Dir: real, Why: fmt.Sprintf("it holds your home directory %s", termsafe.Name(home))}
		}
	}
	for _, g := range p.Dirs {
		if g.Path == "" {
			continue
		}
		if gp := resolve(g.Path); gp == real || within(gp, real) {
			return "", &RefusedError{Dir: real, Why: fmt.Sprintf("it holds %s (%s)", g.What, termsafe.Name(gp))}
		}
	}
	return real, nil
}

// within reports whether path is strictly inside dir.
func within(path, dir string) bool {
	if dir == "/" {
		return path != "/"
	}
	return strings.HasPrefix(path, dir+"/")
}

// resolve is path made absolute with links followed as far as it exists:
// a guarded directory that does not exist yet is guarded where it would be.
func resolve(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	var rest []string
	for cur := abs; ; cur = filepath.Dir(cur) {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(append([]string{real}, rest...)...)
		}
		if cur == "/" || cur == "." {
			return abs
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
	}
}
