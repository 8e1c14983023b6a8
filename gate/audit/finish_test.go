package audit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/state"
)

// TestAuditState: an audit being completed by a live process is pending; one
// whose completion failed, or whose finisher died, is incomplete (never shown
// as complete); one completed has no marker left.
func TestAuditState(t *testing.T) {
	dir := t.TempDir()
	if err := AuditState(dir, "s1"); err != nil {
		t.Fatalf("no marker: %v", err)
	}
	if err := MarkFinishing(dir, "s1", state.Owner()); err != nil {
		t.Fatal(err)
	}
	if err := AuditState(dir, "s1"); !errors.Is(err, ErrAuditPending) {
		t.Errorf("finisher alive: %v", err)
	}
	start := time.Now()
	if err := WaitAudit(dir, "s1", 100*time.Millisecond); !errors.Is(err, ErrAuditPending) || time.Since(start) < 100*time.Millisecond {
		t.Errorf("WaitAudit gave up early or said %v", err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		FinishedAudit(dir, "s1", nil)
	}()
	if err := WaitAudit(dir, "s1", 5*time.Second); err != nil {
		t.Errorf("completed while waited for: %v", err)
	}
	if _, err := os.Stat(markerPath(dir, "s1")); !os.IsNotExist(err) {
		t.Errorf("the marker remains: %v", err)
	}

	FinishedAudit(dir, "s2", errors.New("write audit: no space left on device"))
	if err := AuditState(dir, "s2"); !errors.Is(err, ErrAuditIncomplete) || !strings.Contains(err.Error(), "no space left") {
		t.Errorf("failed completion: %v", err)
	}

	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	MarkFinishing(dir, "s3", state.OwnerOf(dead.Process.Pid))
	if err := AuditState(dir, "s3"); !errors.Is(err, ErrAuditIncomplete) {
		t.Errorf("finisher gone: %v", err)
	}

	os.WriteFile(markerPath(dir, "s4"), []byte("not json"), 0o600)
	if err := AuditState(dir, "s4"); !errors.Is(err, ErrAuditIncomplete) {
		t.Errorf("unreadable marker: %v", err)
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), markerPath(dir, "s5")); err != nil {
		t.Fatal(err)
	}
	if err := AuditState(dir, "s5"); !errors.Is(err, ErrAuditIncomplete) {
		t.Errorf("a link as marker: %v", err)
	}
}
