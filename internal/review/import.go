package review

// The review layer of a session whose project was a copy on an engine that
// is not local (session's remote.go): no overlay ran there, so the agent's
// changes are found by comparing the copy, as the engine's archive of it
// gives it back, with the project, and written as the overlay's upper
// directory would have held them: what is new or differs, and a whiteout
// (a character device 0:0, which an unprivileged process may make) for
// what the copy no longer has of what was sent. Compute, aisb review and
// Apply then read it as any other review layer; Apply's check against the
// baseline refuses a change to a file the user changed meanwhile.

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrImport wraps what is wrong with the copy's archive.
var ErrImport = errors.New("the project's copy cannot be read back")

// ImportStats is what Import wrote into the layer.
type ImportStats struct{ Changed, Deleted int }

// Import writes into upper what the archive of the project's copy changed
// against project. The archive's entries are under one first component
// (Podman names a copy of /project "project/…"); sent are the paths that
// were copied to the engine (project.ArchiveStats.Paths): those the copy
// lacks were deleted by the agent. Nothing is written outside upper: a
// name that leaves it, or a parent that is not a directory the import
// made, is refused.
func Import(upper, project string, archive io.Reader, sent []string) (ImportStats, error) {
	var st ImportStats
	im := importer{upper: upper, project: project}
	have := map[string]bool{}
	tr := tar.NewReader(archive)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("%w: %v", ErrImport, err)
		}
		rel, ok := stripFirst(h.Name)
		if !ok {
			return st, fmt.Errorf("%w: entry %s", ErrImport, Quote(h.Name))
		}
		if rel == "" {
			continue
		}
		have[rel] = true
		changed, err := im.entry(rel, h, tr)
		if err != nil {
			return st, err
		}
		if changed {
			st.Changed++
		}
	}
	slices.Sort(sent)
	for _, p := range sent {
		if have[p] || deletedAbove(p, have, sent) {
			continue
		}
		if err := im.parent(p); err != nil {
			return st, err
		}
		if err := unix.Mknod(filepath.Join(upper, filepath.FromSlash(p)), unix.S_IFCHR, 0); err != nil {
			return st, fmt.Errorf("review: the whiteout of %s: %w", Quote(p), err)
		}
		st.Deleted++
	}
	return st, nil
}

// stripFirst drops the archive's first component and refuses a name that
// is not clean and relative.
func stripFirst(name string) (string, bool) {
	name = strings.TrimSuffix(name, "/")
	_, rest, _ := strings.Cut(name, "/")
	if rest == "" {
		return "", !strings.Contains(name, "..") && !strings.HasPrefix(name, "/")
	}
	if path.Clean(rest) != rest || strings.HasPrefix(rest, "/") || rest == ".." || strings.HasPrefix(rest, "../") {
		return "", false
	}
	return rest, true
}

// deletedAbove says whether a parent of p was deleted as well (its
// whiteout covers p).
func deletedAbove(p string, have map[string]bool, sent []string) bool {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if !have[d] {
			if _, found := slices.BinarySearch(sent, d); found {
				return true
			}
		}
	}
	return false
}

type importer struct{ upper, project string }

// parent makes rel's parent directories in the layer (each one a real
// directory, never a link) and returns once they are there.
func (im importer) parent(rel string) error {
	dir := path.Dir(rel)
	if dir == "." {
		return nil
	}
	cur := im.upper
	for _, c := range strings.Split(dir, "/") {
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.Mkdir(cur, 0o755); err != nil {
				return fmt.Errorf("review: %w", err)
			}
		case err != nil:
			return fmt.Errorf("review: %w", err)
		case !fi.IsDir():
			return fmt.Errorf("%w: %s is under %s, which is not a directory", ErrImport, Quote(rel), Quote(c))
		}
	}
	return nil
}

// entry writes one entry of the copy into the layer when it differs from
// the project's, and says whether it did. Directories are always made
// (with their mode): Compute finds no change in one that matches.
func (im importer) entry(rel string, h *tar.Header, r io.Reader) (bool, error) {
	if err := im.parent(rel); err != nil {
		return false, err
	}
	dst := filepath.Join(im.upper, filepath.FromSlash(rel))
	host := filepath.Join(im.project, filepath.FromSlash(rel))
	hfi, herr := os.Lstat(host)
	mode := os.FileMode(h.Mode) & os.ModePerm
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return false, fmt.Errorf("review: %w", err)
		}
		if fi, err := os.Lstat(dst); err != nil || !fi.IsDir() {
			return false, fmt.Errorf("%w: %s is not a directory in the layer", ErrImport, Quote(rel))
		}
		return herr != nil || !hfi.IsDir() || hfi.Mode().Perm() != mode, os.Chmod(dst, mode)
	case tar.TypeSymlink:
		if herr == nil && hfi.Mode()&os.ModeSymlink != 0 {
			if t, err := os.Readlink(host); err == nil && t == h.Linkname {
				return false, nil
			}
		}
		if err := os.Symlink(h.Linkname, dst); err != nil {
			return false, fmt.Errorf("review: %w", err)
		}
		return true, nil
	case tar.TypeReg, tar.TypeLink:
		if h.Typeflag == tar.TypeLink {
			// A hard link to an earlier entry: its content, from the
			// layer when it changed, else the project's.
			src, ok := stripFirst(h.Linkname)
			if !ok {
				return false, fmt.Errorf("%w: link %s", ErrImport, Quote(h.Linkname))
			}
			// Never through a link: a symbolic link the copy holds (or
			// the project's own) would bring a file of this host's, which
			// the agent never saw, into the project as the link's content.
			f, err := openRegular(im.upper, src)
			if errors.Is(err, os.ErrNotExist) {
				f, err = openRegular(im.project, src)
			}
			if err != nil {
				return false, fmt.Errorf("%w: hard link %s to %s: %v", ErrImport, Quote(rel), Quote(h.Linkname), err)
			}
			defer f.Close()
			r = f
		}
		// An unchanged file is read and compared, never written: only
		// from its first difference on is it written into the layer.
		var equal int64
		var block []byte
		if herr == nil && hfi.Mode().IsRegular() && hfi.Mode().Perm() == mode && (h.Typeflag == tar.TypeLink || hfi.Size() == h.Size) {
			same, n, b, err := compareStream(host, r)
			if err != nil {
				return false, err
			}
			if same {
				return false, nil
			}
			equal, block = n, b
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return false, fmt.Errorf("review: %w", err)
		}
		if equal > 0 {
			// The bytes equal to the project's, read again from it.
			err = copyPrefix(f, host, equal)
		}
		if err == nil {
			_, err = f.Write(block)
		}
		if err == nil {
			_, err = io.Copy(f, r)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return false, fmt.Errorf("review: %w", err)
		}
		return true, os.Chmod(dst, mode)
	}
	return false, nil // a device or a pipe: not brought back
}

// errNotRegular is openRegular's refusal of anything but a regular file.
var errNotRegular = errors.New("not a regular file")

// openRegular opens rel (slash-separated, clean) beneath base for reading
// only if it is a regular file reached through directories alone: no
// component is followed if it is a link. The layer is aisb's own and the
// copy's agent is elsewhere, so nothing changes it between the checks.
func openRegular(base, rel string) (*os.File, error) {
	cur := base
	parts := strings.Split(rel, "/")
	for _, c := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			return nil, errNotRegular
		}
	}
	path := filepath.Join(cur, parts[len(parts)-1])
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, errNotRegular
		}
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, errNotRegular
	}
	return f, nil
}

// compareStream reads r against the file host, a block at a time, until
// they differ or both end: same, or how many bytes were equal before the
// block that differs and that block of r's, to write before the rest.
func compareStream(host string, r io.Reader) (same bool, equal int64, block []byte, err error) {
	f, err := os.Open(host)
	if err != nil {
		return false, 0, nil, nil
	}
	defer f.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(r, ba)
		if ea != nil && ea != io.EOF && ea != io.ErrUnexpectedEOF {
			return false, 0, nil, fmt.Errorf("review: %w", ea)
		}
		nb, eb := io.ReadFull(f, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, equal, ba[:na], nil
		}
		if ea != nil || eb != nil {
			return ea != nil && eb != nil, equal, nil, nil
		}
		equal += int64(na)
	}
}

// copyPrefix writes the first n bytes of the file host to w.
func copyPrefix(w io.Writer, host string, n int64) error {
	f, err := os.Open(host)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(w, f, n)
	return err
}

// RecordSent keeps what was copied to the engine (Import's sent) in the
// session's directory, so that the changes can still be brought back from
// the copy when aisb died before it did so (the session's watchdog).
func (s *Session) RecordSent(paths []string) error {
	return writeJSON(s.sentPath(), paths)
}

// Sent is what RecordSent kept; ok false when nothing was: the copy did
// not complete, so the agent never ran on it.
func (s *Session) Sent() (paths []string, ok bool, err error) {
	err = readJSON(s.sentPath(), &paths)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	return paths, err == nil, err
}

func (s *Session) sentPath() string { return filepath.Join(s.Dir, "sent.json") }

// RecordImportFailure keeps why the copy's changes could not all be
// brought back into the layer, for aisb review to say (and --apply to
// refuse: the layer may hold only part of them).
func (s *Session) RecordImportFailure(why string) error {
	return writeJSON(s.importFailurePath(), why)
}

// ImportFailure is what RecordImportFailure kept; "" for none.
func (s *Session) ImportFailure() string {
	var why string
	if err := readJSON(s.importFailurePath(), &why); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return why
}

func (s *Session) importFailurePath() string { return filepath.Join(s.Dir, "import-failed.json") }
