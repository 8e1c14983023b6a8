// Package safefile reads and writes files in places another party can write
// (the project, the gate's directory) without following links, blocking or
// reading without end.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNotRegular is wrapped when the path is a directory, FIFO, device or
// socket: nothing aisb reads from there can be anything but a plain file.
var ErrNotRegular = errors.New("not a regular file")

// ErrSymlink is wrapped when the path is a symbolic link, which is never
// followed where another party can write.
var ErrSymlink = errors.New("a symbolic link, which aisb does not follow here")

// ErrTooLarge is wrapped when the file is larger than the reader's cap.
var ErrTooLarge = errors.New("too large")

// Read reads the file at path once: opened without following a final
// symbolic link and without blocking (a FIFO cannot hang it), it must be a
// regular file of at most max bytes. A missing file wraps fs.ErrNotExist.
func Read(path string, max int64) ([]byte, error) {
	return read(path, max, syscall.O_NOFOLLOW)
}

// ReadFollow is Read for a file of the user's own (their configuration may
// be a link into a dotfiles repository): it follows links, but the target
// must still be a regular file within the cap.
func ReadFollow(path string, max int64) ([]byte, error) {
	return read(path, max, 0)
}

func read(path string, max int64, flags int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|flags, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) && flags&syscall.O_NOFOLLOW != 0 {
			return nil, &fs.PathError{Op: "read", Path: path, Err: ErrSymlink}
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (it is %s)", ErrNotRegular, kind(fi.Mode()))}
	}
	if fi.Size() > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes, at most %d are read", ErrTooLarge, fi.Size(), max)}
	}
	// One read of at most max+1 bytes: a file that grew past the cap since
	// the fstat is refused rather than read without end.
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(b)) > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)}
	}
	return b, nil
}

// OpenLog opens a log aisb follows, for reading (and writing with rw: hole
// punching needs it): never through a link, without blocking, a regular
// file only.
func OpenLog(path string, rw bool) (*os.File, error) {
	mode := os.O_RDONLY
	if rw {
		mode = os.O_RDWR
	}
	f, err := os.OpenFile(path, mode|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: ErrSymlink}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (it is %s)", ErrNotRegular, kind(fi.Mode()))}
	}
	return f, nil
}

// Write replaces the file at path with content, never through a link an
// other party planted: it writes a new file (O_EXCL, O_NOFOLLOW) beside it
// and renames it over path, which replaces a link instead of following it.
func Write(path string, content []byte, perm os.FileMode) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".aisb-new")
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	default:
		return "not a plain file"
	}
}
