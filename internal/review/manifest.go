package review

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Entry is what one path of the host project looked like when the session
// started. No content hash: ctime cannot be set back by any user tool, so
// any write or chmod since is seen without reading the file, and start-up
// does not grow with the project's size.
type Entry struct {
	Type  string `json:"t"` // file, dir, symlink, other
	Mode  uint32 `json:"m"` // permission bits with setuid/setgid/sticky
	Size  int64  `json:"s"`
	Mtime int64  `json:"mt"` // nanoseconds
	Ctime int64  `json:"ct"`
	Ino   uint64 `json:"i"`
}

// Manifest maps each project-relative path to its Entry.
type Manifest map[string]Entry

// MaxEntries bounds the manifest; a larger project cannot use review mode.
const MaxEntries = 500_000

// ErrTooLarge is a project with more than MaxEntries paths.
var ErrTooLarge = errors.New("project too large for review mode")

func entryOf(st *unix.Stat_t) Entry {
	return Entry{
		Type: typeOf(uint32(st.Mode)), Mode: uint32(st.Mode) & 0o7777, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: st.Ino,
	}
}

func typeOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// Snapshot records every path under project (symlinks are not followed).
func Snapshot(project string) (Manifest, error) {
	m := Manifest{}
	err := filepath.WalkDir(project, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(project, p)
		if rel == "." {
			return nil
		}
		if len(m) >= MaxEntries {
			return fmt.Errorf("%w: more than %d paths under %s; run without --review, or in a smaller directory", ErrTooLarge, MaxEntries, project)
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		m[filepath.ToSlash(rel)] = entryOf(&st)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record the project: %w", err)
	}
	return m, nil
}

// same reports whether the host path still looks as recorded. For a
// directory only its type and mode matter: entries added beside the agent's
// are not a conflict, and those under a deleted directory are checked one by one.
func same(a, b Entry) bool {
	if a.Type != b.Type || a.Mode != b.Mode {
		return false
	}
	if a.Type == "dir" {
		return true
	}
	return a.Size == b.Size && a.Mtime == b.Mtime && a.Ctime == b.Ctime && a.Ino == b.Ino
}

// gitDirsOf lists the repositories of a project's record: every ".git"
// (directory or file), and every directory git would take for a git
// directory (a HEAD beside objects and refs, or a commondir), in path order.
func gitDirsOf(m Manifest) []string {
	var out []string
	for p, e := range m {
		dir, base := "", p
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			dir, base = p[:i], p[i+1:]
		}
		switch {
		case base == ".git":
			out = append(out, p)
		case base == "HEAD" && e.Type != "dir" && path.Base(dir) != ".git":
			if m[dir+"/objects"].Type == "dir" || m[dir+"/refs"].Type == "dir" || m[dir+"/commondir"].Type != "" {
				out = append(out, dir)
			}
		}
	}
	slices.Sort(out)
	return out
}
