package project

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ArchiveStats is what Archive wrote.
type ArchiveStats struct {
	Files, Dirs, Links int
	Bytes              int64 // the files' contents
	Ignored            bool  // git's ignore rules chose what went (a git work tree)
	// Paths are the entries written, relative and slash-separated (what a
	// review of the copy may find deleted).
	Paths []string
}

// Archive writes the project dir as a tar stream to w, for a copy into a
// volume on an engine that cannot see this host's files: entries relative
// to the project's root, owned by uid:gid (the agent's), with their modes;
// regular files, directories and symbolic links (as links, never
// followed); sockets, devices and pipes are left out. In a git work tree,
// what git ignores (.gitignore, .git/info/exclude, core.excludesFile) is
// left out too: `git ls-files --cached --others --exclude-standard` says
// what goes, and the .git directory goes whole. Outside git, everything.
//
// git runs with core.fsmonitor off: the project's own .git/config, which
// whoever controls the project writes, must not run a program here.
func Archive(ctx context.Context, dir string, w io.Writer, uid, gid int) (ArchiveStats, error) {
	a := &archiver{tw: tar.NewWriter(w), dir: dir, uid: uid, gid: gid, seen: map[string]bool{}}
	files, err := gitFiles(ctx, dir)
	switch {
	case err == nil:
		a.st.Ignored = true
		if fi, err := os.Lstat(filepath.Join(dir, ".git")); err == nil && fi.IsDir() {
			if err := a.walk(".git"); err != nil {
				return a.st, err
			}
		}
		for _, f := range files {
			fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(f)))
			if errors.Is(err, fs.ErrNotExist) {
				continue // tracked, deleted from the work tree
			}
			if err != nil {
				return a.st, fmt.Errorf("project archive: %w", err)
			}
			if fi.IsDir() {
				// A submodule: git lists it as one entry.
				err = a.walk(f)
			} else {
				err = a.add(f, fi)
			}
			if err != nil {
				return a.st, err
			}
		}
	case errors.Is(err, errNotGit):
		if err := a.walk("."); err != nil {
			return a.st, err
		}
	default:
		return a.st, err
	}
	if err := a.tw.Close(); err != nil {
		return a.st, fmt.Errorf("project archive: %w", err)
	}
	return a.st, nil
}

var errNotGit = errors.New("not a git work tree")

// gitFiles lists what git does not ignore under dir, relative to it; an
// errNotGit when dir is no git work tree (or git is missing).
func gitFiles(ctx context.Context, dir string) ([]string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, errNotGit
	}
	git := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "core.fsmonitor=false", "-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	if out, err := git("rev-parse", "--is-inside-work-tree"); err != nil || strings.TrimSpace(string(out)) != "true" {
		return nil, errNotGit
	}
	out, err := git("ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return nil, fmt.Errorf("project archive: %w", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" && !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	return files, nil
}

type archiver struct {
	tw       *tar.Writer
	dir      string
	uid, gid int
	seen     map[string]bool // directories written
	st       ArchiveStats
}

// walk adds rel (relative to the project, slash-separated) and everything
// under it.
func (a *archiver) walk(rel string) error {
	return filepath.WalkDir(filepath.Join(a.dir, filepath.FromSlash(rel)), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("project archive: %w", err)
		}
		r, err := filepath.Rel(a.dir, p)
		if err != nil {
			return err
		}
		if r == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("project archive: %w", err)
		}
		return a.add(filepath.ToSlash(r), fi)
	})
}

// add writes one entry, its parent directories first.
func (a *archiver) add(rel string, fi fs.FileInfo) error {
	if err := a.parents(path.Dir(rel)); err != nil {
		return err
	}
	hdr := &tar.Header{Name: rel, Mode: int64(fi.Mode().Perm()), Uid: a.uid, Gid: a.gid, ModTime: fi.ModTime(), Format: tar.FormatPAX}
	p := filepath.Join(a.dir, filepath.FromSlash(rel))
	switch {
	case fi.IsDir():
		if a.seen[rel] {
			return nil
		}
		a.seen[rel] = true
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		a.st.Dirs++
		a.st.Paths = append(a.st.Paths, rel)
		return a.header(hdr)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("project archive: %w", err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		a.st.Links++
		a.st.Paths = append(a.st.Paths, rel)
		return a.header(hdr)
	case fi.Mode().IsRegular():
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("project archive: %w", err)
		}
		defer f.Close()
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		if err := a.header(hdr); err != nil {
			return err
		}
		// A file that grows while it is copied is cut at its size then.
		n, err := io.Copy(a.tw, io.LimitReader(f, fi.Size()))
		if err == nil && n < fi.Size() {
			err = fmt.Errorf("%s shrank while it was copied", rel)
		}
		if err != nil {
			return fmt.Errorf("project archive: %w", err)
		}
		a.st.Files++
		a.st.Paths = append(a.st.Paths, rel)
		a.st.Bytes += n
		return nil
	}
	return nil // a socket, a device or a pipe: never copied
}

// parents writes the directories of rel that are not written yet.
func (a *archiver) parents(rel string) error {
	if rel == "." || rel == "/" || a.seen[rel] {
		return nil
	}
	if err := a.parents(path.Dir(rel)); err != nil {
		return err
	}
	fi, err := os.Lstat(filepath.Join(a.dir, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Errorf("project archive: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("project archive: %s is no longer a directory", rel)
	}
	return a.add(rel, fi)
}

func (a *archiver) header(h *tar.Header) error {
	if h.ModTime.IsZero() {
		h.ModTime = time.Now()
	}
	if err := a.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("project archive: %w", err)
	}
	return nil
}
