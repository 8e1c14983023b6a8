package review

// The importer's reading and writing (import.go): what it may write, and
// how it reads a file of the layer or the project to compare it.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// budget sets what the import may write: the layer's free space less
// importReserve.
func (im *importer) budget() error {
	up, err := openRoot(im.upper)
	if err != nil {
		return fmt.Errorf("review: %w", err)
	}
	defer up.Close()
	free, err := up.freeBytes()
	if err != nil {
		return fmt.Errorf("review: the layer's free space: %w", err)
	}
	im.left = int64(min(free, 1<<62)) - importReserve
	return nil
}

// limited is a writer into the layer that fails once the budget is spent.
type limited struct {
	w  io.Writer
	im *importer
}

func (l limited) Write(p []byte) (int, error) {
	if int64(len(p)) > l.im.left {
		return 0, fmt.Errorf("%w: its changes need more than the %d bytes the layer's file system can spare (it keeps %d free)", ErrImportTooLarge, max(l.im.left, 0), int64(importReserve))
	}
	n, err := l.w.Write(p)
	l.im.left -= int64(n)
	return n, err
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

// compareStream reads r against the project's file f, a block at a time,
// until they differ or both end: same, or how many bytes were equal before
// the block that differs and that block of r's, to write before the rest.
func compareStream(f *os.File, r io.Reader) (same bool, equal int64, block []byte, err error) {
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
