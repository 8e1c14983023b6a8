// Package registry records the user's running sessions, one file each, so
// that aisb ps, allow, deny and watch can find them.
package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/aisb-dev/aisb/internal/state"
)

// Entry is one running session as its aisb process recorded it. Only that
// process writes it; the gate and the sandbox never see the directory.
type Entry struct {
	ID        string    `json:"id"`
	Project   string    `json:"project"`
	Mode      string    `json:"mode"`
	GatePort  int       `json:"gate_port,omitempty"`
	Gate      string    `json:"gate,omitempty"` // a long-lived gate's name, when the session uses one
	Allowlist []string  `json:"allowlist"`      // in force now: at start plus what was allowed live
	Ask       bool      `json:"ask,omitempty"`
	Started   time.Time `json:"started"`
	Owner     string    `json:"owner"`             // state.Owner of the session's aisb process
	Control   string    `json:"control,omitempty"` // the session's control socket; empty: not steerable
}

// OwnerPID is the owner's process id.
func (e Entry) OwnerPID() string {
	pid, _, _ := strings.Cut(e.Owner, ":")
	return pid
}

var idRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ErrNoSession is returned when no running session matches.
var ErrNoSession = errors.New("no running session")

// ErrUnsafe wraps every refusal to use a registry path that is a symlink,
// not ours, or open to others.
var ErrUnsafe = errors.New("unsafe registry path")

// AmbiguousError is returned when a session was not named and several run.
type AmbiguousError struct{ IDs []string }

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("%d sessions are running (%s); name one with --session ID", len(e.IDs), strings.Join(e.IDs, ", "))
}

// PrepareRegistry creates the registry directory (0700), where sessions also put
// their control sockets, and refuses one that is a symlink, owned by
// someone else or open to others.
func PrepareRegistry(dir string) error { return ensureDir(dir) }

func ensureDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("registry: %w", err)
	}
	return checkDir(dir)
}

func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("registry: %w: %s is not a directory (a symlink?); remove it", ErrUnsafe, dir)
	case !ok || int(st.Uid) != os.Getuid():
		return fmt.Errorf("registry: %w: %s is not owned by you; remove it", ErrUnsafe, dir)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("registry: %w: %s is open to others (mode %o); chmod 700 it", ErrUnsafe, dir, fi.Mode().Perm())
	}
	return nil
}

// EntryPath is the entry file of a session id.
func EntryPath(dir, id string) string { return filepath.Join(dir, id+".json") }

// SocketPath is where a session's control socket lives: beside its entry,
// in the same directory only the user can enter.
func SocketPath(dir, id string) string { return filepath.Join(dir, id+".sock") }

// Register records e in dir (state.Paths.RunningDir), replacing its previous
// record atomically.
func Register(dir string, e Entry) error {
	if !idRE.MatchString(e.ID) {
		return fmt.Errorf("registry: session id %q: want [a-z0-9-]", e.ID)
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	tmp := filepath.Join(dir, "."+e.ID+".tmp")
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("registry: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("registry: %w", err)
	}
	if err := os.Rename(tmp, EntryPath(dir, e.ID)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}

// Unregister deletes a session's entry and control socket.
func Unregister(dir, id string) {
	if !idRE.MatchString(id) {
		return
	}
	os.Remove(EntryPath(dir, id))
	os.Remove(SocketPath(dir, id))
}

// Sessions returns the running sessions, oldest first. Entries whose owner is
// gone are removed; symlinks and files that do not parse are skipped.
func Sessions(dir string) ([]Entry, error) {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	var out []Entry
	for _, p := range names {
		e, err := read(p)
		if err != nil {
			continue
		}
		if !state.OwnerAlive(e.Owner) {
			Unregister(dir, e.ID)
			continue
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// read parses one entry file, refusing anything but a regular file whose
// name agrees with its id.
func read(p string) (Entry, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return Entry{}, fmt.Errorf("registry: %w: %s is not a regular file", ErrUnsafe, p)
	}
	var e Entry
	if err := json.NewDecoder(f).Decode(&e); err != nil {
		return Entry{}, fmt.Errorf("registry: %s: %w", p, err)
	}
	if !idRE.MatchString(e.ID) || filepath.Base(p) != e.ID+".json" {
		return Entry{}, fmt.Errorf("registry: %s: id %q does not match its file", p, e.ID)
	}
	return e, nil
}

// FindSession returns the running session id, or the only one when id is empty.
func FindSession(dir, id string) (Entry, error) {
	list, err := Sessions(dir)
	if err != nil {
		return Entry{}, err
	}
	if id == "" {
		switch len(list) {
		case 0:
			return Entry{}, fmt.Errorf("%w; start one with aisb run", ErrNoSession)
		case 1:
			return list[0], nil
		}
		ids := make([]string, len(list))
		for i, e := range list {
			ids[i] = e.ID
		}
		return Entry{}, &AmbiguousError{IDs: ids}
	}
	for _, e := range list {
		if e.ID == id {
			return e, nil
		}
	}
	return Entry{}, fmt.Errorf("%w with id %q; aisb ps lists them", ErrNoSession, id)
}
