package review

// What a remote copy's session keeps in its directory about the copy, so
// that whoever brings the agent's changes back (aisb's own end, or the
// watchdog when aisb died) and whoever applies them agree on where they
// are: sent.json says the copy was made (and what it held), imported.json
// that its changes are all in the layer, import-failed.json why they are
// not. Between the first and the second the layer is not the agent's
// work, and Apply refuses it (ErrImportPending).

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrImportPending is an apply refused because the agent's changes are
// still, wholly or partly, in the engine's copy of the project, not in the
// review's layer.
var ErrImportPending = errors.New("the agent's changes are not all brought back from the engine's copy")

// RecordSent keeps what was copied to the engine (Import's sent) in the
// session's directory, so that the changes can still be brought back from
// the copy when aisb died before it did so (the session's watchdog). From
// then on the layer is pending until Reimport has filled it.
func (s *Session) RecordSent(paths []string) error {
	return writeJSON(s.sentPath(), paths)
}

// Sent is what RecordSent kept; ok false when nothing was: the copy did
// not complete, so the agent never ran on it.
func (s *Session) Sent() (paths []string, ok bool, err error) {
	err = readJSON(s.sentPath(), &paths)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	return paths, err == nil, err
}

// Imported says whether the copy's changes are all in the layer.
func (s *Session) Imported() bool {
	_, err := os.Lstat(s.importedPath())
	return err == nil
}

// importPending is why the layer is not the agent's whole work yet: a
// copy was sent and its changes not all brought back. "" when it is.
func (s *Session) importPending() string {
	// Only whether a copy was sent matters here, not its list (up to
	// MaxEntries paths): the record's presence, never read.
	if _, err := os.Lstat(s.sentPath()); errors.Is(err, os.ErrNotExist) || s.Imported() {
		return ""
	} else if err != nil {
		return err.Error()
	}
	if why := s.ImportFailure(); why != "" {
		return why
	}
	return "the session's end has not brought them back yet"
}

// Reimport writes the changes of the copy's archive into the layer, made
// anew (what an import cut short wrote is dropped), under the session's
// lock, so no apply reads it half-written; on success the session is
// marked imported. A session applied or discarded meanwhile is left alone
// (ErrClosed).
func (s *Session) Reimport(archive io.Reader, sent []string) (ImportStats, error) {
	unlock, err := s.lock()
	if err != nil {
		return ImportStats{}, err
	}
	defer unlock()
	if s.Meta.State != StateOpen {
		return ImportStats{}, fmt.Errorf("%w: %s was %s", ErrClosed, s.Meta.Session, s.Meta.State)
	}
	if err := os.RemoveAll(s.Upper()); err != nil {
		return ImportStats{}, fmt.Errorf("review: %w", err)
	}
	if err := os.Mkdir(s.Upper(), 0o700); err != nil {
		return ImportStats{}, fmt.Errorf("review: %w", err)
	}
	st, err := Import(s.Upper(), s.Meta.Project, archive, sent)
	if err != nil {
		return st, err
	}
	if err := writeJSON(s.importedPath(), st); err != nil {
		return st, err
	}
	os.Remove(s.importFailurePath())
	return st, nil
}

func (s *Session) sentPath() string     { return filepath.Join(s.Dir, "sent.json") }
func (s *Session) importedPath() string { return filepath.Join(s.Dir, "imported.json") }

// RecordImportFailure keeps why the copy's changes could not all be
// brought back into the layer, for aisb review to say (and --apply to
// refuse: the layer may hold only part of them).
func (s *Session) RecordImportFailure(why string) error {
	return writeJSON(s.importFailurePath(), why)
}

// ImportFailure is what RecordImportFailure kept; "" for none.
func (s *Session) ImportFailure() string {
	var why string
	if err := readJSON(s.importFailurePath(), &why); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return why
}

func (s *Session) importFailurePath() string { return filepath.Join(s.Dir, "import-failed.json") }
