package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Audit is a session's (or long-lived gate's) audit file. Two writers share
// it: the gate's follower and, for a session gate, the session's live
// server (policy changes and questions). Each write is one whole line, one
// writer at a time, and all of them count against the session's cap.
type Audit struct {
	session string
	mu      sync.Mutex
	f       *os.File
	w       io.Writer
}

// OpenAudit opens auditDir/SESSION.jsonl for appending, within lim (the
// oldest audit files go first when all of them would exceed lim.Total). An
// audit that already reached its cap (one continued by the session's
// watchdog) stays capped.
func OpenAudit(auditDir, session string, lim AuditLimits) (*Audit, error) {
	if err := os.MkdirAll(auditDir, 0o700); err != nil {
		return nil, fmt.Errorf("audit directory: %w", err)
	}
	path := filepath.Join(auditDir, session+".jsonl")
	if lim.Total > 0 {
		// Room for this session's cap under the total.
		if err := PruneAudit(auditDir, max(lim.Total-lim.Session, 1), path); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit file: %w", err)
	}
	w := CapAudit(f, fi.Size(), lim.Session, session)
	if fi.Size() > 0 && endsCapped(path) {
		w.(*cappedWriter).capped = true
	}
	return &Audit{session: session, f: f, w: w}, nil
}

// Write appends p, which must be whole lines.
func (a *Audit) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.w.Write(p)
}

// Record appends one event, stamped with the time and session when unset.
func (a *Audit) Record(e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if e.Session == "" {
		e.Session = a.session
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("write audit: %w", err)
	}
	if _, err := a.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write audit: %w", err)
	}
	return nil
}

// Close closes the file; nothing is written after.
func (a *Audit) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.f.Close(); err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	return nil
}
