// changes.go is long because every case of reading an overlay upper layer
// (whiteout, opaque directory, type change, copy-up) lives in one walk.

package review

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind is what happened to a path.
type Kind string

const (
	Added    Kind = "added"
	Modified Kind = "modified" // content, symlink target or type
	Deleted  Kind = "deleted"
	ModeOnly Kind = "mode"
	Special  Kind = "special" // a device, fifo or socket: listed, never applied
)

// Change is one path the agent changed, against the host project as it is now.
type Change struct {
	Path      string   `json:"path"`
	Kind      Kind     `json:"kind"`
	Type      string   `json:"type"` // file, dir, symlink, other: what is there after (for deleted: what was)
	OldType   string   `json:"old_type,omitempty"`
	Mode      string   `json:"mode,omitempty"` // octal permission bits
	OldMode   string   `json:"old_mode,omitempty"`
	Size      int64    `json:"size,omitempty"`
	OldSize   int64    `json:"old_size,omitempty"`
	SHA256    string   `json:"sha256,omitempty"`
	OldSHA256 string   `json:"old_sha256,omitempty"`
	Target    string   `json:"target,omitempty"` // symlink target
	OldTarget string   `json:"old_target,omitempty"`
	Flags     []string `json:"flags,omitempty"` // why it may run on the host later
	Binary    bool     `json:"binary,omitempty"`
	Diff      []string `json:"diff,omitempty"` // unified diff lines, raw
	// Within is set on a deleted path that goes with a deleted directory
	// above it: apply removes the directory, listing shows each path.
	Within bool `json:"within,omitempty"`

	mode, oldMode uint32
}

// ErrUnsupportedLayer is an upper layer aisb cannot read faithfully
// (overlay metacopy or redirect xattrs, which this mount never sets).
var ErrUnsupportedLayer = errors.New("upper layer uses an overlay feature review cannot read")

// maxDiffSize is the largest file shown as a diff.
const maxDiffSize = 1 << 20

// Compute lists what the upper layer changes in project, in path order.
func Compute(project, upper string) ([]Change, error) {
	h, err := openRoot(project)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	u, err := openRoot(upper)
	if err != nil {
		return nil, err
	}
	defer u.Close()
	u.ownMode = true
	c := &computer{host: h, upper: u}
	if err := c.walk("", false); err != nil {
		return nil, err
	}
	slices.SortStableFunc(c.out, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	for i := range c.out {
		c.out[i].Flags = hostRunFlags(c.out[i])
	}
	return c.out, nil
}

type computer struct {
	host, upper *root
	out         []Change
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func octal(m uint32) string { return fmt.Sprintf("%04o", m&0o7777) }

// walk compares the upper directory rel with the host's. In an opaque
// directory (the agent removed it and made it again) nothing of the host's
// below shows through: what the upper layer lacks there is deleted.
func (c *computer) walk(rel string, opaque bool) error {
	names, err := c.upper.readDirAt(rel)
	if err != nil {
		return fmt.Errorf("read upper layer: %w", err)
	}
	slices.Sort(names)
	for _, name := range names {
		p := join(rel, name)
		if err := checkRel(p); err != nil {
			return err
		}
		if err := c.entry(p, opaque); err != nil {
			return err
		}
	}
	if opaque {
		hnames, err := c.hostNames(rel)
		if err != nil {
			return err
		}
		for _, name := range hnames {
			if slices.Contains(names, name) {
				continue
			}
			if err := c.deleted(join(rel, name), false); err != nil {
				return err
			}
		}
	}
	return nil
}

// hostNames lists host directory rel, or nothing when it is not a directory there.
func (c *computer) hostNames(rel string) ([]string, error) {
	st, ok, err := c.host.lstatAt(rel)
	if err != nil || !ok || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, err
	}
	names, err := c.host.readDirAt(rel)
	slices.Sort(names)
	return names, err
}

func (c *computer) entry(p string, opaque bool) error {
	us, ok, err := c.upper.lstat(p)
	if err != nil || !ok {
		return fmt.Errorf("read upper layer %s: %v", Quote(p), err)
	}
	hs, hok, err := c.host.lstat(p)
	if err != nil {
		return err
	}
	hdir := hok && hs.Mode&unix.S_IFMT == unix.S_IFDIR
	switch us.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if us.Rdev != 0 {
			c.out = append(c.out, Change{Path: p, Kind: Special, Type: "other"})
			return nil
		}
		// A whiteout: the agent deleted p.
		if hok {
			return c.deleted(p, false)
		}
		return nil
	case unix.S_IFDIR:
		opq, err := c.upper.overlayXattrs(p)
		if err != nil {
			return err
		}
		ch := Change{Path: p, Type: "dir", Mode: octal(us.Mode), mode: us.Mode & 0o7777}
		switch {
		case !hok:
			ch.Kind = Added
			c.out = append(c.out, ch)
		case hdir:
			if hs.Mode&0o7777 != us.Mode&0o7777 {
				ch.Kind, ch.OldMode, ch.oldMode = ModeOnly, octal(hs.Mode), hs.Mode&0o7777
				c.out = append(c.out, ch)
			}
		default:
			ch.Kind, ch.OldType = Modified, typeOf(hs.Mode)
			c.out = append(c.out, ch)
		}
		return c.walk(p, (opaque || opq) && hdir)
	case unix.S_IFREG, unix.S_IFLNK:
		return c.leaf(p, &us, &hs, hok, hdir)
	default:
		c.out = append(c.out, Change{Path: p, Kind: Special, Type: "other"})
		return nil
	}
}

// leaf compares a file or symlink of the upper layer with the host's path.
func (c *computer) leaf(p string, us, hs *unix.Stat_t, hok, hdir bool) error {
	ch := Change{Path: p, Type: typeOf(us.Mode), Mode: octal(us.Mode), mode: us.Mode & 0o7777, Size: us.Size}
	var newData []byte
	if ch.Type == "symlink" {
		t, err := c.upper.readlink(p)
		if err != nil {
			return err
		}
		ch.Target, ch.Mode, ch.mode = t, "", 0
	} else {
		sum, data, err := c.upper.hashFile(p)
		if err != nil {
			return err
		}
		ch.SHA256, newData = sum, data
	}
	var oldData []byte
	switch {
	case !hok:
		ch.Kind = Added
	case hdir:
		ch.Kind, ch.OldType = Modified, "dir"
		if err := c.deleted(p, true); err != nil {
			return err
		}
	default:
		ch.OldType, ch.OldMode, ch.oldMode, ch.OldSize = typeOf(hs.Mode), octal(hs.Mode), hs.Mode&0o7777, hs.Size
		if ch.OldType == "symlink" {
			t, err := c.host.readlink(p)
			if err != nil {
				return err
			}
			ch.OldTarget, ch.OldMode, ch.oldMode = t, "", 0
		} else if ch.OldType == "file" {
			sum, data, err := c.host.hashFile(p)
			if err != nil {
				return err
			}
			ch.OldSHA256, oldData = sum, data
		}
		switch {
		case ch.OldType != ch.Type || ch.Target != ch.OldTarget || ch.SHA256 != ch.OldSHA256:
			ch.Kind = Modified
		case ch.mode != ch.oldMode:
			ch.Kind = ModeOnly
		default:
			return nil // copied up but unchanged
		}
		if ch.OldType == ch.Type {
			ch.OldType = ""
		}
	}
	if ch.Type == "file" && ch.Kind != ModeOnly {
		if isText(newData) && (oldData == nil || isText(oldData)) {
			ch.Diff, _ = Unified(string(oldData), string(newData))
		} else {
			ch.Binary = true
		}
	}
	c.out = append(c.out, ch)
	return nil
}

// deleted records the host's path p, and everything under it, as deleted.
// within: a change above already removes p.
func (c *computer) deleted(p string, within bool) error {
	hs, ok, err := c.host.lstat(p)
	if err != nil || !ok {
		return err
	}
	ch := Change{Path: p, Kind: Deleted, Type: typeOf(hs.Mode), OldMode: octal(hs.Mode), oldMode: hs.Mode & 0o7777, OldSize: hs.Size, Within: within}
	if ch.Type == "symlink" {
		ch.OldMode, ch.oldMode = "", 0
		if ch.OldTarget, err = c.host.readlink(p); err != nil {
			return err
		}
	}
	if ch.Type == "dir" {
		ch.OldSize = 0
	}
	c.out = append(c.out, ch)
	if ch.Type != "dir" {
		return nil
	}
	names, err := c.host.readDirAt(p)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := c.deleted(join(p, n), true); err != nil {
			return err
		}
	}
	return nil
}

// isText: small, no NUL byte.
func isText(b []byte) bool {
	return len(b) <= maxDiffSize && !bytes.ContainsRune(b, 0)
}

// hashFile returns rel's sha256 and, when it is small enough to diff, its bytes.
func (r *root) hashFile(rel string) (string, []byte, error) {
	f, err := r.open(rel)
	if err != nil && r.ownMode && errors.Is(err, unix.EACCES) {
		// The agent made its file unreadable; the upper layer is ours.
		var st unix.Stat_t
		if st, _, err = r.lstat(rel); err == nil {
			if err = r.chmod(rel, st.Mode&0o7777|0o400); err == nil {
				f, err = r.open(rel)
				r.chmod(rel, st.Mode&0o7777)
			}
		}
	}
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	if r.ownMode {
		if _, err := unix.Fgetxattr(int(f.Fd()), "user.overlay.metacopy", nil); err == nil {
			return "", nil, fmt.Errorf("%w: %s is a metadata-only copy", ErrUnsupportedLayer, Quote(rel))
		}
	}
	var buf bytes.Buffer
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(h, &limitedBuffer{b: &buf, max: maxDiffSize + 1}), f)
	if err != nil {
		return "", nil, fmt.Errorf("read %s: %w", Quote(rel), err)
	}
	var data []byte
	if n <= maxDiffSize {
		data = buf.Bytes()
		if data == nil {
			data = []byte{}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), data, nil
}

type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// readDirAt and lstatAt accept "" for the root itself.
func (r *root) readDirAt(rel string) ([]string, error) { return r.readDir(rel) }

func (r *root) lstatAt(rel string) (unix.Stat_t, bool, error) {
	if rel == "" {
		var st unix.Stat_t
		err := unix.Fstat(r.fd, &st)
		return st, err == nil, err
	}
	return r.lstat(rel)
}

// overlayXattrs reports whether upper directory rel is opaque, and refuses
// the overlay features whose meaning lives outside the upper layer.
func (r *root) overlayXattrs(rel string) (opaque bool, err error) {
	pfd, err := r.dir(rel)
	if err != nil {
		return false, err
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 16)
	for _, ns := range []string{"user.overlay.", "trusted.overlay."} {
		n, err := unix.Fgetxattr(fd, ns+"opaque", buf)
		if err == nil {
			if string(buf[:n]) == "y" {
				opaque = true
			} else {
				return false, fmt.Errorf("%w: %s carries %sopaque=%q", ErrUnsupportedLayer, Quote(rel), ns, buf[:n])
			}
		}
		if _, err := unix.Fgetxattr(fd, ns+"redirect", buf); err == nil || errors.Is(err, unix.ERANGE) {
			return false, fmt.Errorf("%w: %s carries %sredirect", ErrUnsupportedLayer, Quote(rel), ns)
		}
	}
	return opaque, nil
}
