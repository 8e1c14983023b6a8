package statevol

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/safefile"
)

// Bounds on what an import reads from the host.
const (
	MaxImportFile  = 4 << 20
	MaxImportTotal = 64 << 20
	maxImportFiles = 10000
	maxImportDepth = 16
)

// Skipped is a host file an import left out, and why.
type Skipped struct {
	Path   string // relative to the host's home
	Reason string
}

// Imported says what an import copied and what it left out.
type Imported struct {
	Volume  string
	Copied  []string // paths in the volume, relative to the home
	Skipped []Skipped
}

type hostFile struct {
	vol  string // path in the volume
	data []byte
	mode int64
}

// errSkip marks a host path that is left out, not a failure.
type errSkip struct{ reason string }

func (e errSkip) Error() string { return e.reason }

// IsCredential reports whether the path (as in the volume) is one of the
// harness's credentials.
func IsCredential(st harness.State, p string) bool { return matchAny(st.Credentials, p) }

// hostPath is where a volume path lies in the host's home.
func hostPath(st harness.State, vol string) string {
	if h, ok := st.HostPaths[vol]; ok {
		return h
	}
	return vol
}

// Import copies the harness's settings from the host's home into the
// target's volume through the API; credentials only when withCredentials.
// Host files are read without following any symbolic link, regular files
// only, each at most MaxImportFile bytes.
func Import(c engine.Engine, t Target, recordDir, home, img string, withCredentials bool) (*Imported, error) {
	st := t.Harness.State
	files, skipped, err := collect(home, st, withCredentials)
	if err != nil {
		return nil, err
	}
	name, created, err := Ensure(c, t, img, func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	res := &Imported{Volume: name, Skipped: skipped}
	if len(files) > 0 {
		if err := copyIn(c, name, img, bytes.NewReader(tarOf(files))); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		res.Copied = append(res.Copied, f.vol)
	}
	// What the user imported is the baseline the next session is compared
	// with, not a change made by a session.
	rec := loadRecord(recordDir, name, created)
	after, err := settingsNow(c, name, img, st)
	if err != nil {
		return nil, err
	}
	rec.Settings = after
	rec.Dirs = slices.Clone(st.Dirs)
	return res, writeRecord(recordDir, rec)
}

// collect reads the host files an import copies.
func collect(home string, st harness.State, withCredentials bool) ([]hostFile, []Skipped, error) {
	wanted := append([]string{}, st.Settings...)
	if withCredentials {
		wanted = append(wanted, st.Credentials...)
	}
	var files []hostFile
	var skipped []Skipped
	total := 0
	add := func(vol string, data []byte) error {
		if len(files) >= maxImportFiles || total+len(data) > MaxImportTotal {
			return fmt.Errorf("import: more than %d files or %d MiB of settings; copy them by hand", maxImportFiles, MaxImportTotal>>20)
		}
		mode := int64(0o644)
		if IsCredential(st, vol) {
			mode = 0o600
		}
		files = append(files, hostFile{vol: vol, data: data, mode: mode})
		total += len(data)
		return nil
	}
	var walk func(vol, host string, depth int) error
	walk = func(vol, host string, depth int) error {
		entries, err := readDirNoFollow(home, host)
		if err != nil {
			var s errSkip
			if errors.As(err, &s) {
				skipped = append(skipped, Skipped{host, s.reason})
				return nil
			}
			return err
		}
		for _, e := range entries {
			v, h := path.Join(vol, e.Name()), path.Join(host, e.Name())
			switch {
			case e.Type()&os.ModeSymlink != 0:
				skipped = append(skipped, Skipped{h, "a symbolic link"})
			case e.IsDir() && depth < maxImportDepth:
				if err := walk(v, h, depth+1); err != nil {
					return err
				}
			case e.IsDir():
				skipped = append(skipped, Skipped{h, "too deep"})
			case IsCredential(st, v) && !withCredentials:
				skipped = append(skipped, Skipped{h, "a credential (--with-credentials copies it)"})
			case e.Type().IsRegular():
				if err := readInto(home, h, v, add, &skipped); err != nil {
					return err
				}
			default:
				skipped = append(skipped, Skipped{h, "not a regular file"})
			}
		}
		return nil
	}
	if !withCredentials {
		// Say which credentials stay behind, so the user knows to log in.
		for _, cred := range st.Credentials {
			h := hostPath(st, cred)
			if _, err := os.Lstat(filepath.Join(home, h)); err == nil {
				skipped = append(skipped, Skipped{h, "a credential (--with-credentials copies it)"})
			}
		}
	}
	for _, w := range wanted {
		if strings.HasSuffix(w, "/") {
			vol := strings.TrimSuffix(w, "/")
			if err := walk(vol, hostPath(st, vol), 0); err != nil {
				return nil, nil, err
			}
			continue
		}
		if err := readInto(home, hostPath(st, w), w, add, &skipped); err != nil {
			return nil, nil, err
		}
	}
	return files, skipped, nil
}

func readInto(home, host, vol string, add func(string, []byte) error, skipped *[]Skipped) error {
	data, err := readNoFollow(home, host)
	var s errSkip
	switch {
	case errors.As(err, &s):
		if s.reason != "" {
			*skipped = append(*skipped, Skipped{host, s.reason})
		}
		return nil
	case err != nil:
		return err
	}
	return add(vol, data)
}

// checkParents makes sure no directory between home and rel is a symbolic
// link; a missing one is a silent skip.
func checkParents(home, rel string) error {
	parts := strings.Split(rel, "/")
	p := home
	for _, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return errSkip{}
		}
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return errSkip{"a directory on its path is a symbolic link"}
		}
		if !fi.IsDir() {
			return errSkip{}
		}
	}
	return nil
}

func readDirNoFollow(home, rel string) ([]os.DirEntry, error) {
	if err := checkParents(home, rel); err != nil {
		return nil, err
	}
	p := filepath.Join(home, rel)
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, errSkip{}
	case err != nil:
		return nil, fmt.Errorf("import: %w", err)
	case fi.Mode()&os.ModeSymlink != 0:
		return nil, errSkip{"a symbolic link"}
	case !fi.IsDir():
		return nil, errSkip{"not a directory"}
	}
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, errSkip{"cannot be opened without following a link"}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	return entries, nil
}

// readNoFollow reads home/rel if it is a regular file of at most
// MaxImportFile bytes reached without a symbolic link.
func readNoFollow(home, rel string) ([]byte, error) {
	if err := checkParents(home, rel); err != nil {
		return nil, err
	}
	data, err := safefile.Read(filepath.Join(home, rel), MaxImportFile)
	switch {
	case err == nil:
		return data, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, errSkip{}
	case errors.Is(err, safefile.ErrSymlink):
		return nil, errSkip{"a symbolic link"}
	case errors.Is(err, safefile.ErrNotRegular):
		return nil, errSkip{"not a regular file"}
	case errors.Is(err, safefile.ErrTooLarge):
		return nil, errSkip{fmt.Sprintf("larger than %d MiB", MaxImportFile>>20)}
	}
	return nil, errSkip{fmt.Sprintf("cannot be read: %v", errors.Unwrap(err))}
}

// tarOf packs the files with their parent directories, owned by 0:0 (the
// agent inside, see skeleton).
func tarOf(files []hostFile) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	now := time.Now()
	for _, f := range files {
		parts := strings.Split(f.vol, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/")
			if !seen[d] {
				seen[d] = true
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: now})
			}
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.vol, Mode: f.mode, Size: int64(len(f.data)), ModTime: now})
		tw.Write(f.data)
	}
	tw.Close()
	return buf.Bytes()
}
