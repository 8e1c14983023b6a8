package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/state"
)

// TestAuditNeverSilentlyIncomplete: aisb audit waits for the audit of a
// session that has just ended to be completed, and says so when an audit
// may lack requests rather than show it as complete.
func TestAuditNeverSilentlyIncomplete(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_STATE_HOME", home)
	dir := filepath.Join(home, "aisb", "audit")
	os.MkdirAll(dir, 0o700)
	line := `{"time":"2026-11-30T10:00:00Z","session":"%s","event":"network_allowed","method":"CONNECT","host":"allowed.test","port":443,"status":200,"rule":"allowed"}` + "\n"
	write := func(id string) {
		os.WriteFile(filepath.Join(dir, id+".jsonl"), []byte(strings.ReplaceAll(line, "%s", id)), 0o600)
	}

	// Being completed: waited for, then shown without a word.
	write("s-pending")
	if err := audit.MarkFinishing(dir, "s-pending", state.Owner()); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		f, _ := os.OpenFile(filepath.Join(dir, "s-pending.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(strings.ReplaceAll(strings.ReplaceAll(line, "%s", "s-pending"), "allowed.test", "last.test"))
		f.Close()
		audit.FinishedAudit(dir, "s-pending", nil)
	}()
	start := time.Now()
	code, out, errs := runAisb(t, "", "audit", "--session", "s-pending")
	if code != 0 || !strings.Contains(out, "last.test") || errs != "" || time.Since(start) < 300*time.Millisecond {
		t.Errorf("an audit being completed: exit %d after %s, stdout %q, stderr %q", code, time.Since(start), out, errs)
	}

	// Completing it failed: shown, with the reason.
	write("s-failed")
	audit.FinishedAudit(dir, "s-failed", errors.New("write audit: no space left on device"))
	code, out, errs = runAisb(t, "", "audit", "--session", "s-failed")
	if code != 0 || !strings.Contains(out, "allowed.test") || !strings.Contains(errs, "s-failed") || !strings.Contains(errs, "may be incomplete") || !strings.Contains(errs, "no space left") {
		t.Errorf("an audit whose completion failed: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	// Its finisher died before it was done: said so too, in every listing.
	write("s-orphan")
	gone := exec.Command("true")
	gone.Run()
	audit.MarkFinishing(dir, "s-orphan", state.OwnerOf(gone.Process.Pid))
	code, out, errs = runAisb(t, "", "audit")
	if code != 0 || strings.Count(out, "allowed.test") != 3 || !strings.Contains(errs, "s-orphan") || !strings.Contains(errs, "ended before it was done") {
		t.Errorf("an audit whose finisher died: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// Control: a complete audit is shown without a word.
	if code, out, errs := runAisb(t, "", "audit", "--session", "s-pending"); code != 0 || errs != "" || !strings.Contains(out, "allowed.test") {
		t.Errorf("a complete audit: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
