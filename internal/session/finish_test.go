package session

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/state"
)

// sessionWithSecrets lays out a session whose gate holds secrets, as aisb
// leaves it when it hands the gate over: squid.conf, the session CA's key,
// an access log with one line aisb did not convert, finish.json, and the
// audit marked as being completed.
func sessionWithSecrets(t *testing.T) (state.Paths, string) {
	t.Helper()
	paths := state.Paths{State: t.TempDir(), Runtime: t.TempDir()}
	id := "20261201-000000-abcdef"
	g := gateDir(paths.SessionDir(id))
	if err := os.MkdirAll(filepath.Join(g, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	line := "aisb1 1764500000.000 " + id + " 127.0.0.1 GET unlisted.test 80 403 0 not_listed\n"
	for name, body := range map[string]string{"squid.conf": "request_header_add x-api-key \"sk-real\"\n", "tls/ca.key": "key\n", "access.log": line} {
		if err := os.WriteFile(filepath.Join(g, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(handoff{Port: 1, TLSPort: 2})
	if err := os.WriteFile(filepath.Join(paths.SessionDir(id), handoffName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(paths.AuditDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := audit.MarkFinishing(paths.AuditDir(), id, state.Owner()); err != nil {
		t.Fatal(err)
	}
	return paths, id
}

// checkSecretsGone fails unless the gate's secrets are gone and its access
// log is kept.
func checkSecretsGone(t *testing.T, paths state.Paths, id string) {
	t.Helper()
	g := gateDir(paths.SessionDir(id))
	for _, p := range gate.SecretPaths(g) {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s outlived the session: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(g, "access.log")); err != nil {
		t.Errorf("the access log went too: %v", err)
	}
}

// TestFinishRemovesSecrets: the watchdog finishing a gate handed over
// removes its secrets and completes the audit, also when it cannot reach
// Podman to remove the containers.
func TestFinishRemovesSecrets(t *testing.T) {
	paths, id := sessionWithSecrets(t)
	nowhere := engine.Where{URI: "unix://" + filepath.Join(t.TempDir(), "no-podman.sock")}
	if err := Finish(context.Background(), nowhere, paths, id, t.Logf); err == nil {
		t.Error("Finish without Podman reported no error")
	}
	checkSecretsGone(t, paths, id)
	if err := audit.AuditState(paths.AuditDir(), id); err != nil {
		t.Errorf("the audit is not marked complete: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(paths.AuditDir(), id+".jsonl"))
	if !strings.Contains(string(b), "unlisted.test") {
		t.Errorf("the line aisb left was not converted: %q", b)
	}
}

// TestAbandonedRemovesSecrets: the watchdog of a session whose aisb died
// without a word removes the gate's secrets, also without Podman.
func TestAbandonedRemovesSecrets(t *testing.T) {
	paths, id := sessionWithSecrets(t)
	os.Remove(filepath.Join(paths.SessionDir(id), handoffName))
	nowhere := engine.Where{URI: "unix://" + filepath.Join(t.TempDir(), "no-podman.sock")}
	if err := Abandoned(nowhere, paths, id); err == nil {
		t.Error("Abandoned without Podman reported no error")
	}
	checkSecretsGone(t, paths, id)
}
