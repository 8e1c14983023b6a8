package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aisb-dev/aisb/internal/tail"
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

// Follower converts a gate's access log into an audit.
type Follower struct {
	cancel  context.CancelFunc
	done    chan error
	end     int64 // where the follow stopped in the access log, once done
	handoff atomic.Bool
}

// StartFollow appends session's decisions to a as squid writes them to its
// access log at accessLog, from offset from of it: where an earlier follower
// handed off (Handoff), or 0. Stop drains what is left.
func StartFollow(ctx context.Context, accessLog, session string, a *Audit, from int64, logf func(string, ...any)) *Follower {
	fctx, cancel := context.WithCancel(ctx)
	fl := &Follower{cancel: cancel, done: make(chan error, 1)}
	go func() {
		end, err := follow(fctx, accessLog, session, a, tail.Options{Free: true, From: from, Handoff: fl.handoff.Load})
		if err != nil {
			logf("audit of %s stopped: %v", session, err)
		}
		fl.end = end
		fl.done <- err
	}()
	return fl
}

// Stop converts what is left and returns the first error the follower met
// (a write that failed: the audit has a gap, and the caller must say so).
// It does not close the audit.
func (fl *Follower) Stop() error {
	fl.cancel()
	return <-fl.done
}

// Handoff is Stop for a gate that is still running: it converts the
// complete lines written so far and returns the offset in the access log
// where another follower (StartFollow) continues, a line squid is still
// writing included.
func (fl *Follower) Handoff() (int64, error) {
	fl.handoff.Store(true)
	err := fl.Stop()
	return fl.end, err
}
