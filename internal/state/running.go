package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Running is a session whose aisb process still runs, and the project
// directory it mounts.
type Running struct {
	ID      string `json:"-"`
	Project string `json:"project"`
	Owner   string `json:"owner"`
}

// markerName is the session's record of its project, in the session's
// directory (aisb's own; the gate has a subdirectory of its own).
const markerName = "session.json"

// MarkSession records in the session's directory which project it mounts
// and which process owns it, so that other commands (aisb trust) can tell a
// project's agent is running.
func (p Paths) MarkSession(id, project, owner string) error {
	dir := p.SessionDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("mark session: %w", err)
	}
	b, _ := json.Marshal(Running{Project: project, Owner: owner})
	f, err := os.OpenFile(filepath.Join(dir, markerName), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("mark session: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("mark session: %w", err)
	}
	return nil
}

// RunningSessions lists the sessions whose owning process is alive.
func (p Paths) RunningSessions() ([]Running, error) {
	root := filepath.Join(p.State, "sessions")
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	var out []Running
	for _, e := range entries {
		b, err := readMarker(filepath.Join(root, e.Name(), markerName))
		if err != nil {
			continue
		}
		var r Running
		if json.Unmarshal(b, &r) != nil || !OwnerAlive(r.Owner) {
			continue
		}
		r.ID = e.Name()
		out = append(out, r)
	}
	return out, nil
}

// readMarker reads a small regular file without following a link or
// blocking.
func readMarker(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	return io.ReadAll(io.LimitReader(f, 4096))
}

// OwnerOf is the Owner value of another process (see Owner).
func OwnerOf(pid int) string { return fmt.Sprintf("%d:%d", pid, startTime(pid)) }

// SessionProject is the project directory session id recorded
// (MarkSession), alive or not: a watchdog's, to remove what aisb left in it.
func (p Paths) SessionProject(id string) (string, error) {
	b, err := readMarker(filepath.Join(p.SessionDir(id), markerName))
	if err != nil {
		return "", fmt.Errorf("session %s's project: %w", id, err)
	}
	var r Running
	if err := json.Unmarshal(b, &r); err != nil || r.Project == "" {
		return "", fmt.Errorf("session %s's project: unreadable record", id)
	}
	return r.Project, nil
}
