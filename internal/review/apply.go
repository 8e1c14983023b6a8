// apply.go is long because the journal's three phases (stage, commit,
// roll back) must be read side by side: each commit step and its undo.

package review

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/internal/state"
)

// Errors callers match.
var (
	ErrRunning  = errors.New("the session is still running")
	ErrConflict = errors.New("changed on the host since the session started")
	ErrApplied  = errors.New("already applied")
	ErrStopped  = errors.New("stopped by a signal")
)

// ConflictError names the paths apply would change that the host changed
// since the session started.
type ConflictError struct{ Paths []string }

func (e *ConflictError) Error() string {
	q := make([]string, len(e.Paths))
	for i, p := range e.Paths {
		q[i] = Quote(p)
	}
	return fmt.Sprintf("%v: %s", ErrConflict, strings.Join(q, ", "))
}
func (e *ConflictError) Unwrap() error { return ErrConflict }

// Journal states: staging (nothing of the project changed yet), committing
// (renames under way; resumed or rolled back op by op), done (cleanup only).
const (
	jStaging    = "staging"
	jCommitting = "committing"
	jDone       = "done"
)

type journal struct {
	State   string `json:"state"`
	Staging string `json:"staging"` // project-relative directory holding s/N and b/N
	Ops     []op   `json:"ops"`
}

// op is one step of the commit. Path is bytes (base64 in JSON): a name may
// be any bytes, and JSON strings would lose invalid UTF-8.
type op struct {
	Op      string `json:"op"` // remove, mkdir, put, chmod
	Path    []byte `json:"path"`
	N       int    `json:"n"`
	Mode    uint32 `json:"mode,omitempty"`
	OldMode uint32 `json:"old_mode,omitempty"`
	SHA256  string `json:"sha256,omitempty"` // "": too large to hash at listing; Size is checked
	Size    int64  `json:"size,omitempty"`
	Target  []byte `json:"target,omitempty"`
	Type    string `json:"type,omitempty"`
}

// Result is what an apply did.
type Result struct {
	Changes []Change // as listed before the apply
	Skipped []string // special files, never applied
	Resumed bool     // an interrupted apply was finished
}

// Running reports whether the session's aisb run still lives.
func (s *Session) Running() bool { return s.Meta.Owner != "" && state.OwnerAlive(s.Meta.Owner) }

func (s *Session) ready() (unlock func(), err error) {
	if s.Running() {
		return nil, fmt.Errorf("%w (%s); let it end first", ErrRunning, s.Meta.Session)
	}
	unlock, err = s.lock()
	if err != nil {
		return nil, err
	}
	if s.Meta.State != StateOpen {
		unlock()
		return nil, fmt.Errorf("%w: %s was %s", ErrClosed, s.Meta.Session, s.Meta.State)
	}
	return unlock, nil
}

// Apply makes the project what the agent left: it refuses when a path it
// would change was changed on the host since the session started, stages
// every file inside the project, then renames them into place under a
// journal; an interrupted apply is resumed by calling Apply again.
//
// Once ctx is done, staging stops and is removed (nothing of the project
// has changed yet); a commit under way is finished, never cut short.
func (s *Session) Apply(ctx context.Context) (*Result, error) {
	unlock, err := s.ready()
	if err != nil {
		return nil, err
	}
	defer unlock()
	// A remote copy's layer is the agent's work only once all of it came
	// back (importrecord.go): never apply a part as the whole.
	if why := s.importPending(); why != "" {
		return nil, fmt.Errorf("apply %s: %w (%s); --discard drops what came back", s.Meta.Session, ErrImportPending, Printable(why))
	}
	proj, err := openRoot(s.Meta.Project)
	if err != nil {
		return nil, err
	}
	defer proj.Close()
	var j journal
	switch err := readJSON(s.journalPath(), &j); {
	case err == nil && j.State == jStaging:
		// Nothing of the project changed yet: start again.
		if err := proj.removeAll(j.Staging); err != nil {
			return nil, fmt.Errorf("apply: remove staging left by an interrupted apply: %w", err)
		}
		os.Remove(s.journalPath())
	case err == nil:
		res := &Result{Resumed: true}
		if j.State == jCommitting {
			if err := s.commit(proj, &j); err != nil {
				return nil, err
			}
		}
		return res, s.finish(proj, &j, StateApplied)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}

	up, err := openLayer(s.Upper())
	if err != nil {
		return nil, err
	}
	// Modes raised to read are put back if the session stays open; once
	// applied, the layer is gone and there is nothing to put back.
	defer up.Close()
	changes, err := compute(proj, up, s.Meta.Project, s.Meta.GitDirs)
	if err != nil {
		return nil, err
	}
	res := &Result{Changes: changes}
	var base Manifest
	if err := readJSON(s.baselinePath(), &base); err != nil {
		return nil, fmt.Errorf("apply: the record of the project at start: %w", err)
	}
	if err := conflicts(proj, base, changes); err != nil {
		return nil, err
	}
	j = journal{State: jStaging, Staging: ".aisb-apply-" + s.Meta.Session}
	j.Ops, res.Skipped = plan(changes)
	if err := roomFor(proj, j.Ops); err != nil {
		return nil, err
	}
	for _, c := range changes {
		if c.Path == j.Staging || strings.HasPrefix(c.Path, j.Staging+"/") {
			return nil, fmt.Errorf("apply: the agent wrote %s, where apply stages its files; discard this session", Quote(c.Path))
		}
	}
	if err := writeJSON(s.journalPath(), j); err != nil {
		return nil, err
	}
	if err := stage(ctx, proj, up, &j); err != nil {
		if rerr := s.rollback(proj, &j); rerr != nil {
			return nil, fmt.Errorf("%w (and rolling back: %v)", err, rerr)
		}
		return nil, err
	}
	j.State = jCommitting
	if err := writeJSON(s.journalPath(), j); err != nil {
		return nil, err
	}
	if err := s.commit(proj, &j); err != nil {
		return nil, fmt.Errorf("%w; run aisb review --apply again to resume, or --rollback", err)
	}
	return res, s.finish(proj, &j, StateApplied)
}

// conflicts compares every path apply would touch with the record made
// when the session started.
func conflicts(proj *root, base Manifest, changes []Change) error {
	var bad []string
	for _, c := range changes {
		if c.Kind == Special {
			continue
		}
		st, ok, err := proj.lstat(c.Path)
		if err != nil {
			return err
		}
		was, had := base[c.Path]
		if ok != had || (ok && !same(was, entryOf(&st))) {
			bad = append(bad, c.Path)
		}
	}
	if len(bad) > 0 {
		return &ConflictError{Paths: bad}
	}
	return nil
}

// plan orders the ops: removals (old versions move aside), new
// directories parents first, files and symlinks, then modes deepest first
// (a directory may lose its write bit).
func plan(changes []Change) (ops []op, skipped []string) {
	var removes, mkdirs, puts, chmods []op
	n := 0
	for _, c := range changes {
		p := []byte(c.Path)
		switch {
		case c.Kind == Special:
			skipped = append(skipped, c.Path)
			continue
		case c.Within:
			continue
		}
		if c.Kind == Deleted || c.Kind == Modified {
			n++
			removes = append(removes, op{Op: "remove", Path: p, N: n})
		}
		if c.Kind == Deleted {
			continue
		}
		switch {
		case c.Kind == ModeOnly:
			chmods = append(chmods, op{Op: "chmod", Path: p, Mode: c.mode, OldMode: c.oldMode})
		case c.Type == "dir":
			mkdirs = append(mkdirs, op{Op: "mkdir", Path: p})
			chmods = append(chmods, op{Op: "chmod", Path: p, Mode: c.mode, OldMode: 0o700})
		default:
			n++
			puts = append(puts, op{Op: "put", Path: p, N: n, Mode: c.mode, SHA256: c.SHA256, Size: c.Size, Target: []byte(c.Target), Type: c.Type})
		}
	}
	slices.SortStableFunc(chmods, func(a, b op) int { return -strings.Compare(string(a.Path), string(b.Path)) })
	ops = append(append(append(removes, mkdirs...), puts...), chmods...)
	return ops, skipped
}

func (j *journal) staged(o op) string { return j.Staging + "/s/" + strconv.Itoa(o.N) }
func (j *journal) backup(o op) string { return j.Staging + "/b/" + strconv.Itoa(o.N) }

// stage copies every new file and symlink into the staging directory, synced.
func stage(ctx context.Context, proj *root, up *layer, j *journal) error {
	for _, d := range []string{j.Staging, j.Staging + "/s", j.Staging + "/b"} {
		if err := proj.mkdir(d, 0o700); err != nil {
			return fmt.Errorf("apply: stage: %w", err)
		}
	}
	for _, o := range j.Ops {
		if o.Op != "put" {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("apply: %w while staging; nothing of the project was changed", ErrStopped)
		}
		if o.Type == "symlink" {
			if err := proj.symlink(string(o.Target), j.staged(o)); err != nil {
				return fmt.Errorf("apply: stage: %w", err)
			}
			continue
		}
		if err := stageFile(up, proj, string(o.Path), j.staged(o), o); err != nil {
			return err
		}
	}
	// One sync of the file system, not one per file: the commit starts only
	// once every staged byte and name is on disk.
	if err := proj.syncFS(); err != nil {
		return fmt.Errorf("apply: stage: sync: %w", err)
	}
	return nil
}

// ErrNoSpace is an apply whose files would not fit on the project's file
// system (an agent's sparse file costs it nothing in its layer, but a full
// copy here).
var ErrNoSpace = errors.New("not enough space for the agent's files")

// roomFor refuses, before anything is written, files that need more than
// the project's file system has free, naming the largest.
func roomFor(proj *root, ops []op) error {
	var need uint64
	var big []op
	for _, o := range ops {
		if o.Op == "put" && o.Type == "file" {
			need += uint64(o.Size)
			big = append(big, o)
		}
	}
	free, err := proj.freeBytes()
	if err != nil {
		return fmt.Errorf("apply: free space: %w", err)
	}
	// Keep a margin: the project's file system is the user's.
	if need+need/20+64<<20 <= free {
		return nil
	}
	slices.SortFunc(big, func(a, b op) int { return cmp.Compare(b.Size, a.Size) })
	var names []string
	for _, o := range big[:min(3, len(big))] {
		names = append(names, fmt.Sprintf("%s (%d bytes)", Quote(string(o.Path)), o.Size))
	}
	return fmt.Errorf("%w: they take %d bytes and the project's file system has %d free; largest: %s; discard the session, or free space",
		ErrNoSpace, need, free, strings.Join(names, ", "))
}

func stageFile(up *layer, proj *root, from, to string, o op) error {
	st, ok, err := up.lstat(from)
	if err == nil && !ok {
		err = unix.ENOENT
	}
	if err == nil {
		err = up.raise(from, &st, 0o400)
	}
	var f *os.File
	if err == nil {
		f, err = up.open(from)
	}
	if err != nil {
		return fmt.Errorf("apply: read the agent's %s: %w", Quote(from), err)
	}
	defer f.Close()
	h := sha256.New()
	n := &countingWriter{}
	if err := proj.writeFile(to, io.TeeReader(f, io.MultiWriter(h, n)), o.Mode); err != nil {
		return fmt.Errorf("apply: stage %s: %w", Quote(from), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); (o.SHA256 != "" && got != o.SHA256) || n.n != o.Size {
		return fmt.Errorf("apply: the agent's %s changed while it was being applied (is the sandbox still running?)", Quote(from))
	}
	return nil
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// interrupt, when positive, stops a commit before that op: tests use it to
// prove an interrupted apply is resumed or rolled back.
var (
	interrupt      int
	errInterrupted = errors.New("interrupted")
)

func (r *root) exists(rel string) (bool, error) {
	_, ok, err := r.lstat(rel)
	return ok, err
}

// commit runs every op; each one checks whether it already ran, so a
// commit interrupted anywhere is finished by running it again.
func (s *Session) commit(proj *root, j *journal) error {
	for i, o := range j.Ops {
		if interrupt > 0 && i == interrupt {
			return errInterrupted
		}
		p := string(o.Path)
		switch o.Op {
		case "remove":
			done, err := proj.exists(j.backup(o))
			if err != nil {
				return err
			}
			there, err := proj.exists(p)
			if err != nil {
				return err
			}
			if done || !there {
				continue
			}
			if err := proj.rename(p, j.backup(o)); err != nil {
				return fmt.Errorf("apply: %w", err)
			}
		case "mkdir":
			st, ok, err := proj.lstat(p)
			if err != nil {
				return err
			}
			if ok && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				continue
			}
			if err := proj.mkdir(p, 0o700); err != nil {
				return fmt.Errorf("apply: %w", err)
			}
		case "put":
			pending, err := proj.exists(j.staged(o))
			if err != nil {
				return err
			}
			if !pending {
				continue
			}
			if err := proj.rename(j.staged(o), p); err != nil {
				return fmt.Errorf("apply: %w", err)
			}
		case "chmod":
			if err := proj.chmod(p, o.Mode); err != nil {
				return fmt.Errorf("apply: %w", err)
			}
		}
	}
	if err := proj.syncFS(); err != nil {
		return fmt.Errorf("apply: sync: %w", err)
	}
	j.State = jDone
	return writeJSON(s.journalPath(), j)
}

// rollback undoes the ops of an interrupted apply, newest first, and
// removes the staging directory.
func (s *Session) rollback(proj *root, j *journal) error {
	if j.State == jDone {
		return fmt.Errorf("rollback: %w: the apply finished; only its cleanup is left (run aisb review --apply)", ErrApplied)
	}
	if j.State == jCommitting {
		var base Manifest
		if err := readJSON(s.baselinePath(), &base); err != nil {
			return fmt.Errorf("rollback: %w", err)
		}
		for _, o := range slices.Backward(j.Ops) {
			p := string(o.Path)
			var err error
			switch o.Op {
			case "chmod":
				var ok bool
				if _, ok, err = proj.lstat(p); err == nil && ok {
					err = proj.chmod(p, o.OldMode)
				}
			case "put":
				var pending, there bool
				if pending, err = proj.exists(j.staged(o)); err == nil && !pending {
					if there, err = proj.exists(p); err == nil && there {
						err = proj.rename(p, j.staged(o))
					}
				}
			case "mkdir":
				var st unix.Stat_t
				var ok bool
				if st, ok, err = proj.lstat(p); err == nil && ok && st.Mode&unix.S_IFMT == unix.S_IFDIR {
					err = proj.rmdir(p)
				}
			case "remove":
				var backed bool
				if backed, err = proj.exists(j.backup(o)); err == nil && backed {
					err = proj.rename(j.backup(o), p)
				}
			}
			if err != nil {
				return fmt.Errorf("rollback: %w", err)
			}
			// Moving a file back (or resetting its mode) sets its ctime:
			// record the restored path anew, or the next apply would
			// take aisb's own rollback for a host-side edit.
			if o.Op == "remove" || o.Op == "chmod" {
				if _, had := base[p]; had {
					if st, ok, err := proj.lstat(p); err == nil && ok {
						base[p] = entryOf(&st)
					}
				}
			}
		}
		if err := writeJSON(s.baselinePath(), base); err != nil {
			return fmt.Errorf("rollback: %w", err)
		}
	}
	if err := proj.removeAll(j.Staging); err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	if err := os.Remove(s.journalPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("rollback: %w", err)
	}
	return nil
}

// Rollback undoes an interrupted apply; the session stays open for review.
func (s *Session) Rollback() error {
	unlock, err := s.ready()
	if err != nil {
		return err
	}
	defer unlock()
	var j journal
	if err := readJSON(s.journalPath(), &j); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rollback: no interrupted apply in %s", s.Meta.Session)
		}
		return err
	}
	proj, err := openRoot(s.Meta.Project)
	if err != nil {
		return err
	}
	defer proj.Close()
	return s.rollback(proj, &j)
}

// Discard drops the agent's changes (rolling back an interrupted apply first).
func (s *Session) Discard() error {
	unlock, err := s.ready()
	if err != nil {
		return err
	}
	defer unlock()
	var j journal
	err = readJSON(s.journalPath(), &j)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("discard: the journal of an interrupted apply: %w", err)
	}
	if err == nil {
		proj, err := openRoot(s.Meta.Project)
		if err != nil {
			return err
		}
		defer proj.Close()
		if j.State == jDone {
			if err := s.finish(proj, &j, StateApplied); err != nil {
				return err
			}
			return fmt.Errorf("discard %s: %w: an interrupted apply had finished every change, so they stay; only its cleanup was left, and is done", s.Meta.Session, ErrApplied)
		}
		if err := s.rollback(proj, &j); err != nil {
			return err
		}
	}
	return s.finish(nil, nil, StateDiscarded)
}

// finish removes the staging directory, the upper layer and the record of
// the project, and closes the session.
func (s *Session) finish(proj *root, j *journal, st string) error {
	if j != nil {
		if err := proj.removeAll(j.Staging); err != nil {
			return fmt.Errorf("apply: remove staging: %w", err)
		}
	}
	own, err := openRoot(s.Dir)
	if err != nil {
		return err
	}
	defer own.Close()
	if err := own.removeAll("upper"); err != nil {
		return fmt.Errorf("remove the upper layer: %w", err)
	}
	os.Remove(s.baselinePath())
	s.Meta.State = st
	if err := s.save(); err != nil {
		return err
	}
	if err := os.Remove(s.journalPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	own.removeAll("work") // holds files of subordinate ids; see WorkLeft
	return nil
}

// WorkLeft reports whether the overlay's work directory is still there:
// overlay leaves in it a directory of mode 0 owned by a subordinate uid,
// which only a process in the user namespace can remove.
func (s *Session) WorkLeft() bool {
	_, err := os.Lstat(s.Work())
	return err == nil
}
