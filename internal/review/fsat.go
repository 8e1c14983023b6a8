// fsat.go is long because each host-side operation needs its own
// no-follow *at form; they are small and alike.

package review

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/internal/safefile"
)

// root is a directory opened once; every operation below it resolves each
// path component with O_NOFOLLOW from this descriptor, so a symlink (the
// agent's, or one that appears on the host mid-apply) is never followed and
// no path leaves the directory.
type root struct {
	fd    int
	path  string
	layer bool // an overlay upper layer: its overlay xattrs mean something
}

// ErrHostUnsupported is openRoot's error on a host without Linux's no-follow
// primitives (fsat_other.go): review mode is refused there, never emulated.
var ErrHostUnsupported = fmt.Errorf("review mode needs a Linux host (this is %s): run without --review, or run aisb on the engine's Linux machine: %w", runtime.GOOS, errors.ErrUnsupported)

func openRoot(path string) (*root, error) {
	if err := hostSupported(); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	fd, err := unix.Open(path, oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &root{fd: fd, path: path}, nil
}

func (r *root) Close() { unix.Close(r.fd) }

// dir opens the directory rel ("" is the root itself) as an O_PATH descriptor.
func (r *root) dir(rel string) (int, error) {
	fd, err := unix.Dup(r.fd)
	if err != nil {
		return -1, err
	}
	if rel == "" {
		return fd, nil
	}
	if err := checkRel(rel); err != nil {
		unix.Close(fd)
		return -1, err
	}
	for _, c := range strings.Split(rel, "/") {
		nfd, err := unix.Openat(fd, c, oPath|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: Quote(rel), Err: err}
		}
		fd = nfd
	}
	return fd, nil
}

// parent opens the directory holding rel and returns it with rel's last name.
func (r *root) parent(rel string) (int, string, error) {
	if err := checkRel(rel); err != nil {
		return -1, "", err
	}
	dir, base := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, base = rel[:i], rel[i+1:]
	}
	fd, err := r.dir(dir)
	return fd, base, err
}

// absent reports whether err says rel is not there as a plain path: missing,
// or a component on the way is not a directory (a file, a symlink).
func absent(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
}

// lstat stats rel without following anything; ok is false when it is absent.
func (r *root) lstat(rel string) (st unix.Stat_t, ok bool, err error) {
	pfd, base, err := r.parent(rel)
	if err != nil {
		if absent(err) {
			return st, false, nil
		}
		return st, false, err
	}
	defer unix.Close(pfd)
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if absent(err) {
			return st, false, nil
		}
		return st, false, &os.PathError{Op: "lstat", Path: Quote(rel), Err: err}
	}
	return st, true, nil
}

// readDir lists the names in directory rel.
func (r *root) readDir(rel string) ([]string, error) {
	pfd, err := r.dir(rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: Quote(rel), Err: err}
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	return f.Readdirnames(-1)
}

// open opens regular file rel for reading, as safefile reads: a symlink is
// refused, never followed; the open cannot block (a FIFO put there since
// the lstat); and what was opened must be a regular file.
func (r *root) open(rel string) (*os.File, error) {
	pfd, base, err := r.parent(rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			err = safefile.ErrSymlink
		}
		return nil, &os.PathError{Op: "open", Path: Quote(rel), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: Quote(rel), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: Quote(rel), Err: fmt.Errorf("%w (it is %s)", safefile.ErrNotRegular, typeOf(uint32(st.Mode)))}
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// readlink reads symlink rel.
func (r *root) readlink(rel string) (string, error) {
	pfd, base, err := r.parent(rel)
	if err != nil {
		return "", err
	}
	defer unix.Close(pfd)
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(pfd, base, buf)
	if err != nil {
		return "", &os.PathError{Op: "readlink", Path: Quote(rel), Err: err}
	}
	return string(buf[:n]), nil
}

func (r *root) mkdir(rel string, mode uint32) error {
	pfd, base, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, base, mode); err != nil {
		return &os.PathError{Op: "mkdir", Path: Quote(rel), Err: err}
	}
	return nil
}

// rename moves from to to, never replacing what is at to.
func (r *root) rename(from, to string) error {
	ffd, fbase, err := r.parent(from)
	if err != nil {
		return err
	}
	defer unix.Close(ffd)
	tfd, tbase, err := r.parent(to)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	if err := renameNoReplace(ffd, fbase, tfd, tbase); err != nil {
		return &os.LinkError{Op: "rename", Old: Quote(from), New: Quote(to), Err: err}
	}
	return nil
}

// chmod sets rel's permission bits; a symlink is refused, never followed.
func (r *root) chmod(rel string, mode uint32) error {
	pfd, base, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat(pfd, base, oPath|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "chmod", Path: Quote(rel), Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "chmod", Path: Quote(rel), Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return &os.PathError{Op: "chmod", Path: Quote(rel), Err: unix.ELOOP}
	}
	// An O_PATH descriptor cannot fchmod; its /proc link names exactly
	// the inode opened above.
	if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), mode); err != nil {
		return &os.PathError{Op: "chmod", Path: Quote(rel), Err: err}
	}
	return nil
}

func (r *root) rmdir(rel string) error {
	pfd, base, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR); err != nil {
		return &os.PathError{Op: "rmdir", Path: Quote(rel), Err: err}
	}
	return nil
}

func (r *root) symlink(target, rel string) error {
	pfd, base, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Symlinkat(target, pfd, base); err != nil {
		return &os.PathError{Op: "symlink", Path: Quote(rel), Err: err}
	}
	return nil
}

// writeFile creates rel (which must not exist) with src's bytes; the
// caller syncs the file system once all are written.
func (r *root) writeFile(rel string, src io.Reader, mode uint32) error {
	pfd, base, err := r.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: Quote(rel), Err: err}
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if _, err := io.Copy(f, src); err != nil {
		return fmt.Errorf("write %s: %w", Quote(rel), err)
	}
	// Set after writing: the mode may deny the owner write access.
	if err := f.Chmod(os.FileMode(mode & 0o777)); err != nil {
		return err
	}
	if mode&^0o777 != 0 {
		if err := unix.Fchmod(fd, mode); err != nil {
			return &os.PathError{Op: "chmod", Path: Quote(rel), Err: err}
		}
	}
	return f.Close()
}

// removeAll removes rel and everything under it without following symlinks,
// making directories writable on the way (the agent may have made them 0500).
func (r *root) removeAll(rel string) error {
	st, ok, err := r.lstat(rel)
	if err != nil || !ok {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		pfd, base, err := r.parent(rel)
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		if err := unix.Unlinkat(pfd, base, 0); err != nil && !absent(err) {
			return &os.PathError{Op: "remove", Path: Quote(rel), Err: err}
		}
		return nil
	}
	if st.Mode&0o700 != 0o700 {
		if err := r.chmod(rel, uint32(st.Mode)&0o7777|0o700); err != nil {
			return err
		}
	}
	names, err := r.readDir(rel)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := r.removeAll(rel + "/" + n); err != nil {
			return err
		}
	}
	if err := r.rmdir(rel); err != nil && !absent(err) {
		return err
	}
	return nil
}

// syncDir flushes directory rel's entries.
func (r *root) syncDir(rel string) error {
	pfd, err := r.dir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}

// freeBytes is the space the root's file system has for this user.
func (r *root) freeBytes() (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(r.fd, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// syncFS flushes the filesystem holding the root.
func (r *root) syncFS() error {
	fd, err := unix.Openat(r.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return syncfs(fd)
}
