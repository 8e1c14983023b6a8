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
// made, is refused; nothing is read outside project (its files are
// reached from one descriptor, no link followed: fsat.go). What it writes
// is bounded by the free space of upper's file system, less a reserve
// (ErrImportTooLarge).
func Import(upper, project string, archive io.Reader, sent []string) (ImportStats, error) {
	var st ImportStats
	proj, err := openRoot(project)
	if err != nil {
		return st, fmt.Errorf("review: %w", err)
	}
	defer proj.Close()
	im := importer{upper: upper, proj: proj}
	if err := im.budget(); err != nil {
		return st, err
	}
	have := map[string]bool{}
	notDir := map[string]bool{} // in the copy, but not as a directory
	var dirs []dirMode
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
		if len(have) >= MaxEntries {
			return st, fmt.Errorf("%w: the copy holds more than %d entries", ErrImportTooLarge, MaxEntries)
		}
		have[rel] = true
		if h.Typeflag != tar.TypeDir {
			notDir[rel] = true
		}
		changed, err := im.entry(rel, h, tr)
		if err != nil {
			return st, err
		}
		if h.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirMode{rel, os.FileMode(h.Mode) & os.ModePerm})
		}
		if changed {
			st.Changed++
		}
	}
	slices.Sort(sent)
	for _, p := range sent {
		if have[p] || deletedAbove(p, have, notDir, sent) {
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
	// The directories' modes last, the deepest first: a directory the
	// agent left read-only still had its contents written into it.
	for _, d := range slices.Backward(dirs) {
		if err := os.Chmod(filepath.Join(upper, filepath.FromSlash(d.rel)), d.mode); err != nil {
			return st, fmt.Errorf("review: %w", err)
		}
	}
	return st, nil
}

// ErrImportTooLarge is a copy whose changes would take more than the
// layer's file system can spare, or more entries than a review lists.
var ErrImportTooLarge = fmt.Errorf("%w: it is too large", ErrImport)

// importReserve is what Import leaves free on the layer's file system.
const importReserve = 1 << 30

type dirMode struct {
	rel  string
	mode os.FileMode
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
// whiteout covers p), or is in the copy as something other than a
// directory (which hides whatever was below it).
func deletedAbove(p string, have, notDir map[string]bool, sent []string) bool {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if notDir[d] {
			return true
		}
		if !have[d] {
			if _, found := slices.BinarySearch(sent, d); found {
				return true
			}
		}
	}
	return false
}

// importer writes the layer (upper, aisb's own) and reads the project
// only through proj.
type importer struct {
	upper string
	proj  *root
	left  int64 // the bytes it may still write (budget)
}

// parent makes rel's parent directories in the layer (each one a real
// directory, never a link) and returns once they are there.
func (im *importer) parent(rel string) error {
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
// (their modes are set at the end, by Import): Compute finds no change in
// one that matches. The project's side is read from one descriptor (a
// file compared is the file whose bytes are copied), through directories
// only.
func (im *importer) entry(rel string, h *tar.Header, r io.Reader) (bool, error) {
	if err := im.parent(rel); err != nil {
		return false, err
	}
	dst := filepath.Join(im.upper, filepath.FromSlash(rel))
	hst, hok, herr := im.proj.lstat(rel)
	if herr != nil {
		hok = false // unreadable on the host: the copy's entry is a change
	}
	hmode := uint32(hst.Mode)
	mode := os.FileMode(h.Mode) & os.ModePerm
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return false, fmt.Errorf("review: %w", err)
		}
		if fi, err := os.Lstat(dst); err != nil || !fi.IsDir() {
			return false, fmt.Errorf("%w: %s is not a directory in the layer", ErrImport, Quote(rel))
		}
		return !hok || hmode&unix.S_IFMT != unix.S_IFDIR || os.FileMode(hmode&0o777) != mode, nil
	case tar.TypeSymlink:
		if hok && hmode&unix.S_IFMT == unix.S_IFLNK {
			if t, err := im.proj.readlink(rel); err == nil && t == h.Linkname {
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
				f, err = im.proj.open(src)
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
		var host *os.File
		if hok && hmode&unix.S_IFMT == unix.S_IFREG && os.FileMode(hmode&0o777) == mode && (h.Typeflag == tar.TypeLink || hst.Size == h.Size) {
			if f, err := im.proj.open(rel); err == nil {
				host = f
				defer host.Close()
			}
		}
		if host != nil {
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
		w := limited{w: f, im: im}
		if equal > 0 {
			// The bytes equal to the project's, read again from the
			// same descriptor, never by name.
			_, err = io.Copy(w, io.NewSectionReader(host, 0, equal))
		}
		if err == nil {
			_, err = w.Write(block)
		}
		if err == nil {
			_, err = io.Copy(w, r)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return false, fmt.Errorf("review: %s: %w", Quote(rel), err)
		}
		return true, os.Chmod(dst, mode)
	}
	return false, nil // a device or a pipe: not brought back
}
