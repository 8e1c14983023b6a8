// Package state names where aisb keeps its files and who owns a running session.
package state

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Paths are where aisb keeps its files, read from the environment once, at
// the top of the command, and passed down.
type Paths struct {
	Config  string // $XDG_CONFIG_HOME/aisb, else ~/.config/aisb
	State   string // $XDG_STATE_HOME/aisb, else ~/.local/state/aisb
	Runtime string // $XDG_RUNTIME_DIR, else /run/user/UID (Podman's socket lives there)
}

// FromEnv reads the XDG directories through getenv (os.Getenv in aisb).
func FromEnv(getenv func(string) string) (Paths, error) {
	var p Paths
	home := getenv("HOME")
	xdg := func(name, fallback string) (string, error) {
		if d := getenv(name); d != "" {
			return filepath.Join(d, "aisb"), nil
		}
		if home == "" {
			return "", fmt.Errorf("find aisb's directories: set %s or HOME", name)
		}
		return filepath.Join(home, fallback, "aisb"), nil
	}
	var err error
	if p.Config, err = xdg("XDG_CONFIG_HOME", ".config"); err != nil {
		return Paths{}, err
	}
	if p.State, err = xdg("XDG_STATE_HOME", filepath.Join(".local", "state")); err != nil {
		return Paths{}, err
	}
	p.Runtime = getenv("XDG_RUNTIME_DIR")
	if p.Runtime == "" {
		p.Runtime = fmt.Sprintf("/run/user/%d", os.Getuid())
	}
	return p, nil
}

// UserConfig is the user's configuration file.
func (p Paths) UserConfig() string { return filepath.Join(p.Config, "config.toml") }

// TrustStore is the file `aisb trust` writes.
func (p Paths) TrustStore() string { return filepath.Join(p.Config, "trusted") }

// SessionsDir holds a directory per session.
func (p Paths) SessionsDir() string { return filepath.Join(p.State, "sessions") }

// SessionDir holds one session's gate files and policy.
func (p Paths) SessionDir(id string) string { return filepath.Join(p.SessionsDir(), id) }

// GateDir holds a long-lived gate's files.
func (p Paths) GateDir(name string) string { return filepath.Join(p.State, "gates", name) }

// AuditDir holds one JSON-lines audit file per session.
func (p Paths) AuditDir() string { return filepath.Join(p.State, "audit") }

// RunningDir holds the registry of running sessions and their control
// sockets: written only by each session's own aisb process.
func (p Paths) RunningDir() string { return filepath.Join(p.State, "running") }

// LockDir holds aisb's lock files: in the user's runtime directory, never a
// directory another user can write.
func (p Paths) LockDir() string { return filepath.Join(p.Runtime, "aisb") }

// DigestDir remembers the digests of image input files (image.Digest): in
// the user's runtime directory, so a reboot forgets them.
func (p Paths) DigestDir() string { return filepath.Join(p.Runtime, "aisb", "digests") }

// NewSessionID is sortable by start time and unique: 20261129-112233-a1b2c3.
func NewSessionID() string {
	b := make([]byte, 3)
	rand.Read(b)
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// Owner identifies this process for as long as it lives: "PID:STARTTIME",
// where STARTTIME (from /proc/PID/stat) tells a reused PID apart.
func Owner() string {
	pid := os.Getpid()
	return fmt.Sprintf("%d:%d", pid, startTime(pid))
}

// OwnerAlive reports whether the process named by an Owner value still runs.
// An unreadable value counts as dead, so its containers get reaped.
func OwnerAlive(owner string) bool {
	pid, st, ok := parseOwner(owner)
	return ok && startTime(pid) == st
}

// OwnerExited reports whether the process named by an Owner value has
// exited: gone, or a zombie not yet reaped (its files are closed).
func OwnerExited(owner string) bool {
	pid, st, ok := parseOwner(owner)
	if !ok {
		return true
	}
	f := stat(pid)
	if len(f) < 20 {
		return true
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v != st || f[0] == "Z" || f[0] == "X"
}

func parseOwner(owner string) (pid int, start uint64, ok bool) {
	p, s, ok := strings.Cut(owner, ":")
	pid, err1 := strconv.Atoi(p)
	st, err2 := strconv.ParseUint(s, 10, 64)
	if !ok || err1 != nil || err2 != nil || pid <= 0 || st == 0 {
		return 0, 0, false
	}
	return pid, st, true
}

// startTime is field 22 of /proc/PID/stat, or 0 when the process is gone.
func startTime(pid int) uint64 {
	f := stat(pid)
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// stat is /proc/PID/stat from field 3 (the state) on, or nil.
func stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}
