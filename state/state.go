// Package state names where aisb keeps what a session leaves behind (its gate
// files and audit log) and who owns a running session.
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

// Dir is $XDG_STATE_HOME/aisb, else ~/.local/state/aisb.
func Dir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "aisb"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find state directory: set XDG_STATE_HOME or HOME: %w", err)
	}
	return filepath.Join(home, ".local", "state", "aisb"), nil
}

// SessionDir holds one session's gate files.
func SessionDir(id string) (string, error) { return sub("sessions", id) }

// GateDir holds a long-lived gate's files.
func GateDir(name string) (string, error) { return sub("gates", name) }

// AuditDir holds one JSON-lines audit file per session.
func AuditDir() (string, error) { return sub("audit") }

func sub(parts ...string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{d}, parts...)...), nil
}

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
	p, s, ok := strings.Cut(owner, ":")
	pid, err1 := strconv.Atoi(p)
	st, err2 := strconv.ParseUint(s, 10, 64)
	if !ok || err1 != nil || err2 != nil || pid <= 0 {
		return false
	}
	return startTime(pid) == st && st != 0
}

// startTime is field 22 of /proc/PID/stat, or 0 when the process is gone.
func startTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}
