package image

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/internal/safefile"
)

// File is a file of an image's build context, known by its content's
// digest: the tag says the digest, and the build copies the content only
// once it has checked that it still has that digest.
type File struct {
	Path string   // where the content is, on this host
	Size int64    // its size when hashed
	Sum  [32]byte // SHA-256 of the content
}

// ErrInputChanged is returned by a build whose input file no longer has the
// digest its tag was computed from.
var ErrInputChanged = errors.New("changed since aisb hashed it; run the command again")

// racyWithin is how recent a file's change may be for its digest not to be
// remembered: the kernel stamps a change with a clock that advances in
// ticks, so a change made within a tick of the stat could leave the stamps
// as they were (git's "racily clean" entries).
const racyWithin = 2 * time.Second

// Digest returns the file at path with its digest. The digest of a file
// read before is remembered in cacheDir (the user's runtime directory, "":
// none) under the file's identity: device, inode, size, change and
// modification times. Any write to the file changes its change time,
// which no program can set back, so a remembered digest is only used for
// the very content it was computed from. Hashing the sandbox's 5 MB
// entrypoint took 50-60 ms of each session's start on a 2-core VM, on its
// critical path; a remembered digest takes well under a millisecond.
//
// A cache that cannot be used safely (not the user's own, open to others,
// unreadable) is ignored: the file is hashed. The racy window is judged by
// this host's clock, so a file on a network file system whose server's
// clock runs behind could be remembered within a change's tick; aisb's
// binaries are the user's own, normally on a local disk.
func Digest(path, cacheDir string) (File, error) { return digest(path, cacheDir, time.Now) }

func digest(path, cacheDir string, now func() time.Time) (File, error) {
	f, err := os.Open(path)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return File{}, fmt.Errorf("%s: not a regular file", path)
	}
	id := identity(&st)
	entry := ""
	if cacheDir != "" && cacheUsable(cacheDir) {
		entry = filepath.Join(cacheDir, cacheKey(path))
		if sum, ok := lookup(entry, id); ok {
			return File{Path: path, Size: st.Size, Sum: sum}, nil
		}
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	if n != st.Size {
		return File{}, fmt.Errorf("%s: %w", path, ErrInputChanged)
	}
	// A file written while it was read has a digest of no content of its
	// own: refused, and not remembered.
	var after unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &after); err != nil || identity(&after) != id {
		return File{}, fmt.Errorf("%s: %w", path, ErrInputChanged)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	if entry != "" && !racy(&st, now()) {
		remember(entry, id, sum)
	}
	return File{Path: path, Size: st.Size, Sum: sum}, nil
}

// identity is what a remembered digest is kept under.
func identity(st *unix.Stat_t) string {
	return fmt.Sprintf("%d %d %d %d %d", st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano())
}

// racy reports whether the file changed too recently for its stamps to
// tell a later change apart.
func racy(st *unix.Stat_t, now time.Time) bool {
	limit := now.Add(-racyWithin).UnixNano()
	return st.Mtim.Nano() > limit || st.Ctim.Nano() > limit
}

// cacheKey names a path's entry.
func cacheKey(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	s := sha256.Sum256([]byte(path))
	return hex.EncodeToString(s[:16])
}

// cacheUsable makes the cache directory if need be and reports whether it
// is a directory of this user's that no one else can open.
func cacheUsable(dir string) bool {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && int(st.Uid) == os.Getuid() && st.Mode&0o077 == 0
}

// entryVersion starts every entry: "v1 IDENTITY SUM".
const entryVersion = "v1"

func lookup(entry, id string) (sum [32]byte, ok bool) {
	b, err := safefile.Read(entry, 512)
	if err != nil {
		return sum, false
	}
	rest, ok := strings.CutPrefix(strings.TrimSuffix(string(b), "\n"), entryVersion+" "+id+" ")
	if !ok {
		return sum, false
	}
	if d, err := hex.DecodeString(rest); err == nil && len(d) == len(sum) {
		copy(sum[:], d)
		return sum, true
	}
	return sum, false
}

// remember writes an entry whole, never through a link (safefile.Write:
// a new file renamed over it). A failure only costs the next session the
// hashing; sessions writing the same entry at once write the same line.
func remember(entry, id string, sum [32]byte) {
	_ = safefile.Write(entry, []byte(entryVersion+" "+id+" "+hex.EncodeToString(sum[:])+"\n"), 0o600)
}

// content reads an input file for the build and checks it still has the
// digest the tag was computed from.
func (f File) content() ([]byte, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != f.Size || sha256.Sum256(b) != f.Sum {
		return nil, fmt.Errorf("%s: %w", f.Path, ErrInputChanged)
	}
	return b, nil
}
