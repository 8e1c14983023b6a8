// Package review keeps a review-mode session's copy-on-write layer and turns it into changes to list, apply or discard.
package review

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/internal/safefile"
)

// States of a review session.
const (
	StateOpen      = "open"
	StateApplied   = "applied"
	StateDiscarded = "discarded"
)

// Meta is what review needs to know about a session, kept in meta.json.
type Meta struct {
	Version int       `json:"version"`
	Session string    `json:"session"`
	Project string    `json:"project"`
	Started time.Time `json:"started"`
	Owner   string    `json:"owner"` // the aisb run process, state.Owner form
	Image   string    `json:"image"` // the sandbox image, to scrub the work directory with
	Git     string    `json:"git"`   // what the project's .git was at start (see docs/review.md)
	// GitDirs are the project's repositories at start (project-relative:
	// each .git, and each bare repository), whose config says where git
	// looks for hooks.
	GitDirs []string `json:"git_dirs,omitempty"`
	State   string   `json:"state"`
}

// Session is one review-mode session's directory: SESSIONDIR/review.
type Session struct {
	Dir  string
	Meta Meta
}

// Errors callers match.
var (
	ErrNoSession = errors.New("no review session")
	ErrClosed    = errors.New("review session already closed")
	ErrBusy      = errors.New("another aisb review is working on this session")
)

// Upper is the overlay's upper layer: the agent's writes.
func (s *Session) Upper() string { return filepath.Join(s.Dir, "upper") }

// Work is the overlay's scratch directory.
func (s *Session) Work() string { return filepath.Join(s.Dir, "work") }

func (s *Session) baselinePath() string { return filepath.Join(s.Dir, "baseline.json") }
func (s *Session) journalPath() string  { return filepath.Join(s.Dir, "journal.json") }

// Begin records the project as it is and makes the empty overlay
// directories under sessionDir/review, before the sandbox starts.
func Begin(sessionDir string, m Meta) (*Session, error) {
	abs, err := filepath.Abs(m.Project)
	if err != nil {
		return nil, fmt.Errorf("review: project: %w", err)
	}
	if m.Project, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, fmt.Errorf("review: project: %w", err)
	}
	s := &Session{Dir: filepath.Join(sessionDir, "review"), Meta: m}
	s.Meta.Version, s.Meta.State = 1, StateOpen
	if s.Meta.Started.IsZero() {
		s.Meta.Started = time.Now().UTC()
	}
	s.Meta.Git = describeGit(m.Project)
	for _, d := range []string{s.Dir, s.Upper(), s.Work()} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("review: %w", err)
		}
	}
	base, err := Snapshot(s.Meta.Project)
	if err != nil {
		return nil, err
	}
	s.Meta.GitDirs = gitDirsOf(base)
	if err := writeJSON(s.baselinePath(), base); err != nil {
		return nil, err
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	return s, nil
}

// describeGit says what .git is in project: a directory, a file (a
// worktree or submodule, naming a git directory outside the project), or none.
func describeGit(project string) string {
	fi, err := os.Lstat(filepath.Join(project, ".git"))
	switch {
	case err != nil:
		return "none"
	case fi.IsDir():
		return "dir"
	case fi.Mode().IsRegular():
		b, err := safefile.Read(filepath.Join(project, ".git"), 4096)
		if err != nil {
			return "file (unreadable)"
		}
		return "file: " + Printable(strings.TrimSpace(string(b)))
	}
	return "other"
}

// Open reads the review session in sessionDir.
func Open(sessionDir string) (*Session, error) {
	s := &Session{Dir: filepath.Join(sessionDir, "review")}
	b, err := safefile.Read(filepath.Join(s.Dir, "meta.json"), 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s (was it started with aisb run --review?)", ErrNoSession, sessionDir)
	}
	if err != nil {
		return nil, fmt.Errorf("review: %w", err)
	}
	if err := json.Unmarshal(b, &s.Meta); err != nil {
		return nil, fmt.Errorf("review: %s: %w", filepath.Join(s.Dir, "meta.json"), err)
	}
	return s, nil
}

// OpenSessions lists the review sessions under sessionsDir not yet applied
// or discarded, newest first (session ids sort by start time).
func OpenSessions(sessionsDir string) ([]*Session, error) {
	ents, err := os.ReadDir(sessionsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("review: %w", err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	var out []*Session
	for _, n := range slices.Backward(names) {
		s, err := Open(filepath.Join(sessionsDir, n))
		if err != nil || s.Meta.State != StateOpen {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// ErrInterrupted is a session whose apply stopped half-way: the project
// holds some of the agent's changes, so a listing against it would mislead.
var ErrInterrupted = errors.New("an apply of this session was interrupted half-way")

// Changes lists what the agent changed, against the project as it is now.
func (s *Session) Changes() ([]Change, error) {
	if s.Meta.State != StateOpen {
		return nil, fmt.Errorf("%w: %s was %s", ErrClosed, s.Meta.Session, s.Meta.State)
	}
	var j journal
	if err := readJSON(s.journalPath(), &j); err == nil && j.State != jStaging {
		return nil, fmt.Errorf("%w (%s): finish it with aisb review --apply %s, or undo it with aisb review --rollback %s", ErrInterrupted, s.Meta.Session, s.Meta.Session, s.Meta.Session)
	}
	return computeIn(s.Meta.Project, s.Upper(), s.Meta.GitDirs)
}

func (s *Session) save() error { return writeJSON(filepath.Join(s.Dir, "meta.json"), s.Meta) }

// lock takes the session's lock for the life of the returned func.
func (s *Session) lock() (unlock func(), err error) {
	fd, err := unix.Open(filepath.Join(s.Dir, "lock"), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("review: lock: %w", err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w (%s)", ErrBusy, s.Meta.Session)
	}
	return func() { unix.Close(fd) }, nil
}

// writeJSON writes v to path atomically and durably.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("review: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("review: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("review: write %s: %w", path, err)
	}
	f.Close()
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// maxRecord bounds the files review reads back (the baseline of MaxEntries
// paths is the largest).
const maxRecord = 256 << 20

func readJSON(path string, v any) error {
	b, err := safefile.Read(path, maxRecord)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("review: %s: %w", path, err)
	}
	return nil
}
