package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/state"
)

// A session gate is finished after its session's aisb has returned: the
// session's watchdog waits until the gate has logged the sandbox's last
// requests, converts them into the audit and removes the gate (see
// session.Finish). While it works, the audit directory holds a marker beside
// the session's audit, so that `aisb audit` never shows that audit as if it
// were complete.

// Errors of an audit that `aisb audit` cannot show as complete.
var (
	// ErrAuditPending: the session has ended and its audit is still being
	// completed; lines may follow within a second.
	ErrAuditPending = errors.New("its session has ended and its last requests are still being added")
	// ErrAuditIncomplete: completing the audit failed, or whoever did it
	// stopped before it was done; requests may be missing.
	ErrAuditIncomplete = errors.New("the audit may be incomplete")
)

// finishing is the marker's content.
type finishing struct {
	Finisher string `json:"finisher"`        // "PID:STARTTIME" of the process completing the audit
	Error    string `json:"error,omitempty"` // why it could not
}

func markerPath(auditDir, session string) string {
	return filepath.Join(auditDir, session+".finishing")
}

// MarkFinishing records that finisher (a "PID:STARTTIME") now completes the
// audit of session.
func MarkFinishing(auditDir, session, finisher string) error {
	b, _ := json.Marshal(finishing{Finisher: finisher})
	if err := safefile.Write(markerPath(auditDir, session), b, 0o600); err != nil {
		return fmt.Errorf("mark the audit of %s as being completed: %w", session, err)
	}
	return nil
}

// FinishedAudit records the end of completing session's audit: the marker
// goes when ferr is nil, else it keeps ferr for `aisb audit` to tell.
func FinishedAudit(auditDir, session string, ferr error) error {
	path := markerPath(auditDir, session)
	if ferr == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("mark the audit of %s complete: %w", session, err)
		}
		return nil
	}
	b, _ := json.Marshal(finishing{Error: ferr.Error()})
	if err := safefile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("record that the audit of %s is incomplete (%v): %w", session, ferr, err)
	}
	return nil
}

// AuditState says whether session's audit is complete as far as aisb
// knows: nil, ErrAuditPending while it is being completed, or an error
// wrapping ErrAuditIncomplete with the reason.
func AuditState(auditDir, session string) error {
	b, err := safefile.Read(markerPath(auditDir, session), 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var m finishing
	if err != nil || json.Unmarshal(b, &m) != nil {
		return fmt.Errorf("%w (its marker %s is unreadable)", ErrAuditIncomplete, markerPath(auditDir, session))
	}
	switch {
	case m.Error != "":
		return fmt.Errorf("%w: %s", ErrAuditIncomplete, m.Error)
	case m.Finisher != "" && state.OwnerAlive(m.Finisher):
		return ErrAuditPending
	default:
		return fmt.Errorf("%w: the process completing it ended before it was done", ErrAuditIncomplete)
	}
}

// WaitAudit waits up to within for session's audit to be complete and
// returns AuditState at the end.
func WaitAudit(auditDir, session string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := AuditState(auditDir, session)
		if !errors.Is(err, ErrAuditPending) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
