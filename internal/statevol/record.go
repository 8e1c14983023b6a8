package statevol

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/harness"
)

// record is what aisb keeps on the host about one state volume: the volume
// itself is writable by the agent, so nothing in it can vouch for it.
type record struct {
	Volume    string    `json:"volume"`
	Created   string    `json:"created"` // the volume's LabelCreated: a new volume of the same name starts afresh
	LastStart time.Time `json:"last_start"`
	LastEnd   time.Time `json:"last_end"`
	// Settings are the SHA-256 of each settings file at the last session's
	// end (or the last import); Changed what differed from the one before.
	Settings map[string]string `json:"settings"`
	Changed  []string          `json:"changed"`
	// Dirs are the harness directories last made in the volume.
	Dirs []string `json:"dirs"`
}

func recordPath(dir, name string) string { return filepath.Join(dir, name+".json") }

func readRecord(dir, name string) (*record, error) {
	b, err := os.ReadFile(recordPath(dir, name))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("state record %s: %w", name, err)
	}
	return &r, nil
}

func writeRecord(dir string, r *record) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state record: %w", err)
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	tmp := recordPath(dir, r.Volume) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("state record: %w", err)
	}
	return os.Rename(tmp, recordPath(dir, r.Volume))
}

func removeRecord(dir, name string) error {
	if err := os.Remove(recordPath(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("state record: %w", err)
	}
	return nil
}

// loadRecord is the volume's record, or a fresh one when there is none or
// it describes an earlier volume of the same name.
func loadRecord(dir, name, created string) *record {
	r, err := readRecord(dir, name)
	if err != nil || r.Created != created {
		return &record{Volume: name, Created: created, Settings: map[string]string{}}
	}
	if r.Settings == nil {
		r.Settings = map[string]string{}
	}
	return r
}

// IsSetting reports whether the path (relative to the home, as in the
// volume) is one of the harness's settings files.
func IsSetting(st harness.State, p string) bool {
	return matchAny(st.Settings, p)
}

func matchAny(patterns []string, p string) bool {
	for _, s := range patterns {
		if p == s || (strings.HasSuffix(s, "/") && strings.HasPrefix(p, s)) {
			return true
		}
	}
	return false
}

// maxHashed bounds what one settings file may cost to hash at session end.
const maxHashed = 64 << 20

// hashSettings reads a tar of the volume and returns the SHA-256 of each
// regular file that is a setting; a symlink is recorded by its target.
func hashSettings(r io.Reader, st harness.State) (map[string]string, error) {
	return hashSettingsUnder(r, st, "")
}

// hashSettingsUnder is hashSettings for a tar whose names are relative to
// prefix (a directory of the volume).
func hashSettingsUnder(r io.Reader, st harness.State, prefix string) (map[string]string, error) {
	out := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read state volume: %w", err)
		}
		p := tarName(h.Name)
		if prefix != "" && prefix != "." {
			if p == "" || p == "." {
				continue
			}
			p = prefix + "/" + p
		}
		if !IsSetting(st, p) {
			continue
		}
		sum := sha256.New()
		switch h.Typeflag {
		case tar.TypeReg:
			if _, err := io.Copy(sum, io.LimitReader(tr, maxHashed)); err != nil {
				return nil, fmt.Errorf("read state volume: %w", err)
			}
		case tar.TypeSymlink:
			io.WriteString(sum, "symlink:"+h.Linkname)
		default:
			continue
		}
		out[p] = hex.EncodeToString(sum.Sum(nil))
	}
}

// settingsNow hashes the settings files in the volume as they are now; what
// it costs is bounded by the settings files, not by the volume. It copies
// the whole volume out in one request and reads only the settings'
// content, unless the volume holds more than wholeBudget: then it stops
// that copy and asks for each settings path alone. Measured with Podman
// 5.4.2 on a 2-core host: an io container costs ~25 ms, each archive
// request 35-100 ms (a copier process each), the whole of a small volume
// ~140 ms and of 95 MB ~310 ms; copying pi's ten settings paths one by one
// cost 370-530 ms whatever the size. So a small volume goes whole, and a
// large one (a sparse 20 GiB file made the whole copy take 165 s) costs
// the budget's read and the paths' requests.
func settingsNow(c engine.Engine, name, img string, st harness.State) (map[string]string, error) {
	var out map[string]string
	err := withVolume(c, name, img, func(ctr string) error {
		var err error
		out, err = hashCopy(c, ctr, ioMount+"/.", "", st, wholeBudget)
		if !errors.Is(err, errOverBudget) {
			return err
		}
		out = map[string]string{}
		for _, p := range st.Settings {
			req, prefix := ioMount+"/"+p, path.Dir(p)
			if dir, ok := strings.CutSuffix(p, "/"); ok {
				req, prefix = ioMount+"/"+dir+"/.", dir
			}
			got, err := hashCopy(c, ctr, req, prefix, st, 0)
			if engine.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			maps.Copy(out, got)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("copy out of state volume %s: %w", name, err)
	}
	return out, nil
}

// wholeBudget is how much of a volume settingsNow reads in one request
// before it asks for the settings paths alone.
const wholeBudget = 32 << 20

// errOverBudget stops a copy that went past its budget.
var errOverBudget = errors.New("the volume is larger than the budget for copying it whole")

// hashCopy copies p out of the io container ctr and hashes the settings in
// it (hashSettings), its entries' names taken as under prefix. With a
// budget (> 0), it stops once more than that was read (errOverBudget);
// either way it ends the copy as soon as the hashes are known, rather than
// reading the rest.
func hashCopy(c engine.Engine, ctr, p, prefix string, st harness.State, budget int64) (map[string]string, error) {
	ctx, cancel := context.WithCancel(context.TODO())
	defer cancel()
	pr, pw := io.Pipe()
	copied := make(chan error, 1)
	go func() {
		err := c.ContainerCopyOut(ctx, ctr, p, pw)
		pw.CloseWithError(err)
		copied <- err
	}()
	r := &countingReader{r: pr, limit: budget}
	got, err := hashSettingsUnder(r, st, prefix)
	// The hashes are known (or the budget is spent): the rest of the copy
	// is not read.
	cancel()
	pr.CloseWithError(io.ErrClosedPipe)
	cerr := <-copied
	switch {
	case r.over:
		return nil, errOverBudget
	case err != nil:
		return nil, err
	case cerr != nil && !errors.Is(cerr, io.ErrClosedPipe) && !errors.Is(cerr, context.Canceled):
		return nil, cerr
	}
	return got, nil
}

// countingReader fails once more than limit (> 0) was read from r.
type countingReader struct {
	r     io.Reader
	n     int64
	limit int64
	over  bool
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if c.limit > 0 && c.n > c.limit {
		c.over = true
		return n, errOverBudget
	}
	return n, err
}

// diff lists the paths added, changed or removed between two manifests.
func diff(before, after map[string]string) []string {
	changed := []string{}
	for p, h := range after {
		if before[p] != h {
			changed = append(changed, p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			changed = append(changed, p)
		}
	}
	sort.Strings(changed)
	return changed
}

// Session is the state volume of one running session.
type Session struct {
	c         engine.Engine
	name      string
	state     harness.State
	recordDir string
	rec       *record
	img       string
}

// Open ensures the target's volume and records the session's start; img
// is the sandbox's image.
func Open(c engine.Engine, t Target, recordDir, img string) (*Session, error) {
	dirs := t.Harness.State.Dirs
	name, created, err := Ensure(c, t, img, func(created string) bool {
		r := loadRecord(recordDir, t.Name(), created)
		return !slices.Equal(r.Dirs, dirs)
	})
	if err != nil {
		return nil, err
	}
	rec := loadRecord(recordDir, name, created)
	rec.Dirs = slices.Clone(dirs)
	rec.LastStart = time.Now().UTC()
	if err := writeRecord(recordDir, rec); err != nil {
		return nil, err
	}
	return &Session{c: c, name: name, state: t.Harness.State, recordDir: recordDir, rec: rec, img: img}, nil
}

// Name is the volume's name.
func (s *Session) Name() string { return s.name }

// Mounts are the volume's directories for the sandbox.
func (s *Session) Mounts() []*specgen.NamedVolume { return Mounts(s.name, s.state) }

// Env are the variables that point the harness at its state; a variable the
// user set keeps the user's value.
func (s *Session) Env(env map[string]string) {
	for k, v := range s.state.Env {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
}

// Close records the session's end: the settings files' hashes and which of
// them the session changed. It returns those.
func (s *Session) Close() ([]string, error) {
	after, err := settingsNow(s.c, s.name, s.img, s.state)
	if err != nil {
		return nil, err
	}
	s.rec.Changed = diff(s.rec.Settings, after)
	s.rec.Settings = after
	s.rec.LastEnd = time.Now().UTC()
	return slices.Clone(s.rec.Changed), writeRecord(s.recordDir, s.rec)
}
