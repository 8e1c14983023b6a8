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
	"path/filepath"
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
	// NotCompared: the file was too large to read for this listing (see
	// maxHashSize, maxReadTotal); it is listed as modified, without a hash.
	NotCompared bool `json:"not_compared,omitempty"`
	// NoDiff says why a changed file has no diff.
	NoDiff string   `json:"no_diff,omitempty"`
	Diff   []string `json:"diff,omitempty"` // unified diff lines, raw
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

// What one listing reads of file contents, so that an agent's huge (or
// sparse: a terabyte costs it nothing) files cannot stall aisb review: no
// file above maxHashSize is read, and no more than maxReadTotal in all.
// Measured: sha256 here reads about 1 GB/s warm.
var (
	maxHashSize  int64 = 256 << 20
	maxReadTotal int64 = 2 << 30
)

// maxLayerEntries bounds the paths of the agent's layer a listing walks.
const maxLayerEntries = MaxEntries

// Compute lists what the upper layer changes in project, in path order.
func Compute(project, upper string) ([]Change, error) {
	return computeIn(project, upper, nil)
}

// computeIn is Compute that also reads the repositories at gitDirs
// (project-relative, recorded at start) for where git looks for hooks.
func computeIn(project, upper string, gitDirs []string) (cs []Change, err error) {
	abs, err := filepath.Abs(project)
	if err != nil {
		return nil, fmt.Errorf("project: %w", err)
	}
	h, err := openRoot(project)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	u, err := openLayer(upper)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := u.Close(); err == nil && cerr != nil {
			cs, err = nil, cerr
		}
	}()
	return compute(h, u, abs, gitDirs)
}

func compute(h *root, u *layer, project string, gitDirs []string) ([]Change, error) {
	st, err := u.rootStat()
	if err != nil {
		return nil, err
	}
	if err := u.raise("", &st, 0o500); err != nil {
		return nil, err
	}
	c := &computer{host: h, upper: u, budget: maxReadTotal, diffWork: maxDiffWork}
	if err := c.walk("", false); err != nil {
		return nil, err
	}
	slices.SortStableFunc(c.out, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	g := newGitView(h, u.root, project, c.out, gitDirs)
	for i := range c.out {
		var flags []string
		for _, f := range slices.Concat(g.hookFlags(c.out[i]), hostRunFlags(c.out[i]), g.configFlags(c.out[i])) {
			if !slices.Contains(flags, f) {
				flags = append(flags, f)
			}
		}
		c.out[i].Flags = flags
	}
	return c.out, nil
}

type computer struct {
	host     *root
	upper    *layer
	out      []Change
	budget   int64 // bytes of content this listing may still read
	diffWork int64 // line comparisons its diffs may still make
	entries  int   // paths of the upper layer seen
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
	if c.entries += len(names); c.entries > maxLayerEntries {
		return fmt.Errorf("%w: the agent's layer holds more than %d paths; discard the session", ErrTooLarge, maxLayerEntries)
	}
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
		if err := c.upper.raise(p, &us, 0o500); err != nil {
			return err
		}
		opq, err := c.upper.overlayXattrs(p)
		if err != nil {
			return err
		}
		ch := Change{Path: p, Type: "dir", Mode: octal(uint32(us.Mode)), mode: uint32(us.Mode) & 0o7777}
		switch {
		case !hok:
			ch.Kind = Added
			c.out = append(c.out, ch)
		case hdir:
			if uint32(hs.Mode)&0o7777 != uint32(us.Mode)&0o7777 {
				ch.Kind, ch.OldMode, ch.oldMode = ModeOnly, octal(uint32(hs.Mode)), uint32(hs.Mode)&0o7777
				c.out = append(c.out, ch)
			}
		default:
			ch.Kind, ch.OldType = Modified, typeOf(uint32(hs.Mode))
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
	ch := Change{Path: p, Type: typeOf(uint32(us.Mode)), Mode: octal(uint32(us.Mode)), mode: uint32(us.Mode) & 0o7777, Size: us.Size}
	var newData, oldData []byte
	if ch.Type == "symlink" {
		t, err := c.upper.readlink(p)
		if err != nil {
			return err
		}
		ch.Target, ch.Mode, ch.mode = t, "", 0
	} else {
		if err := c.upper.raise(p, us, 0o400); err != nil {
			return err
		}
		sum, data, err := c.upper.hashFile(p, us.Size, &c.budget)
		if err != nil {
			return err
		}
		ch.SHA256, newData = sum, data
	}
	oldIsFile := false
	switch {
	case !hok:
		ch.Kind = Added
	case hdir:
		ch.Kind, ch.OldType = Modified, "dir"
		if err := c.deletedBelow(p); err != nil {
			return err
		}
	default:
		ch.OldType, ch.OldMode, ch.oldMode, ch.OldSize = typeOf(uint32(hs.Mode)), octal(uint32(hs.Mode)), uint32(hs.Mode)&0o7777, hs.Size
		oldIsFile = ch.OldType == "file"
		if ch.OldType == "symlink" {
			t, err := c.host.readlink(p)
			if err != nil {
				return err
			}
			ch.OldTarget, ch.OldMode, ch.oldMode = t, "", 0
		} else if oldIsFile && ch.SHA256 != "" {
			sum, data, err := c.host.hashFile(p, hs.Size, &c.budget)
			if err != nil {
				return err
			}
			ch.OldSHA256, oldData = sum, data
		}
		switch {
		case ch.OldType != ch.Type || ch.Target != ch.OldTarget:
			ch.Kind = Modified
		case ch.Type == "file" && (ch.SHA256 == "" || ch.OldSHA256 == ""):
			// Not read (too large): listed as modified, content not compared.
			ch.Kind = Modified
		case ch.SHA256 != ch.OldSHA256:
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
		switch {
		case ch.SHA256 == "" || (oldIsFile && ch.OldSHA256 == ""):
			ch.NotCompared, ch.NoDiff = true, fmt.Sprintf("not read: above %d MiB, or past the %d MiB one review reads", maxHashSize>>20, maxReadTotal>>20)
		case bytes.IndexByte(newData, 0) >= 0 || bytes.IndexByte(oldData, 0) >= 0:
			ch.Binary, ch.NoDiff = true, "binary"
		case newData == nil || (oldIsFile && oldData == nil):
			ch.NoDiff = fmt.Sprintf("larger than %d KiB", maxDiffSize>>10)
		default:
			var ok bool
			if ch.Diff, ok = unified(string(oldData), string(newData), &c.diffWork); !ok {
				ch.NoDiff = "too many differences to show"
			}
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
	ch := Change{Path: p, Kind: Deleted, Type: typeOf(uint32(hs.Mode)), OldMode: octal(uint32(hs.Mode)), oldMode: uint32(hs.Mode) & 0o7777, OldSize: hs.Size, Within: within}
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
	return c.deletedBelow(p)
}

// deletedBelow records everything under the host's directory p as deleted
// with it.
func (c *computer) deletedBelow(p string) error {
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

// hashFile returns rel's sha256 and, when it is small enough to diff, its
// bytes; nothing ("", nil) when size is above maxHashSize or the budget
// left, which it spends.
func (r *root) hashFile(rel string, size int64, budget *int64) (string, []byte, error) {
	if size > maxHashSize || size > *budget {
		return "", nil, nil
	}
	f, err := r.open(rel)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	// Only an overlay's upper layer carries these; a metadata-only copy's
	// bytes live in the lower layer, so its content here is not the agent's.
	for _, ns := range []string{"user.overlay.", "trusted.overlay."} {
		if !r.layer {
			break
		}
		if _, err := unix.Fgetxattr(int(f.Fd()), ns+"metacopy", nil); err == nil || errors.Is(err, unix.ERANGE) {
			return "", nil, fmt.Errorf("%w: %s is a metadata-only copy", ErrUnsupportedLayer, Quote(rel))
		}
	}
	var buf bytes.Buffer
	h := sha256.New()
	// Never more than the budget, even if the file grew since the lstat.
	n, err := io.Copy(io.MultiWriter(h, &limitedBuffer{b: &buf, max: maxDiffSize + 1}), io.LimitReader(f, *budget+1))
	if err != nil {
		return "", nil, fmt.Errorf("read %s: %w", Quote(rel), err)
	}
	if n > *budget || n > maxHashSize {
		*budget = 0
		return "", nil, nil
	}
	*budget -= n
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
