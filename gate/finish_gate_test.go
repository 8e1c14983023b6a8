package gate_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
)

// TestFinishAfterHandoff: a real gate's audit handed from one follower to
// another while a TLS tunnel is open. The front has handed the tunnel to the
// TLS port, which logs it when it closes. The second follower, the
// watchdog's, gets that line: Quiesce waits for it, squid is then killed by
// its process, and every request is in the audit exactly once.
func TestFinishAfterHandoff(t *testing.T) {
	c, img := connect(t)
	g := startGate(t, c, img, "finish-test", hosts(t, "allowed.test"))
	data, err := c.ContainerInspect(context.TODO(), g.Name)
	if err != nil || g.Squid() == "" || !strings.HasPrefix(g.Squid(), fmt.Sprintf("%d:", data.State.Pid)) {
		t.Fatalf("the gate's squid process was not recorded: %q, inspect: %v %+v", g.Squid(), err, data.State)
	}
	auditDir := t.TempDir()
	aud, err := audit.OpenAudit(auditDir, "finish-test", audit.AuditLimits{})
	if err != nil {
		t.Fatal(err)
	}
	first := gate.StartFollow(context.Background(), g, aud, 0, t.Logf)
	if code := get(t, g.Addr(), "http://allowed.test/before-handoff", "allowed.test"); code != 200 {
		t.Fatalf("GET: %d", code)
	}
	// A spliced tunnel: the TLS port peeked at its ClientHello, and holds
	// the front's connection until the tunnel closes.
	held := tls.Client(tunnel(t, g.Addr(), "allowed.test:443"), &tls.Config{InsecureSkipVerify: true, ServerName: "allowed.test"})
	if err := held.Handshake(); err != nil {
		t.Fatalf("TLS through the tunnel: %v", err)
	}
	if gate.ClientConns(g.TLSPort) == 0 {
		t.Fatal("the TLS port holds no connection with the tunnel open (the front's)")
	}
	log := filepath.Join(g.Dir, "access.log")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(log); strings.Contains(string(b), "before-handoff") || strings.Contains(string(b), " GET ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the GET was never logged")
		}
	}
	offset, err := first.Handoff()
	if err != nil || offset == 0 {
		t.Fatalf("handoff at %d: %v", offset, err)
	}
	aud.Close()
	file := filepath.Join(auditDir, "finish-test.jsonl")
	if b, _ := os.ReadFile(file); strings.Count(string(b), "\n") != 1 || strings.Contains(string(b), "CONNECT") {
		t.Fatalf("audit at the handoff, with the tunnel open:\n%s", b)
	}

	closed := make(chan time.Time, 1)
	go func() {
		time.Sleep(400 * time.Millisecond)
		held.Close()
		closed <- time.Now()
	}()
	aud, err = audit.OpenAudit(auditDir, "finish-test", audit.AuditLimits{})
	if err != nil {
		t.Fatal(err)
	}
	second := gate.StartFollow(context.Background(), g, aud, offset, t.Logf)
	g.Quiesce(5 * time.Second)
	quiet := time.Now()
	if at := <-closed; quiet.Before(at.Add(gate.Quiet)) {
		t.Errorf("Quiesce returned %s after the tunnel closed, before squid could log it", quiet.Sub(at))
	}
	if !g.KillSquid(time.Second) {
		t.Error("squid was not killed through its process")
	}
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}
	aud.Close()
	b, _ := os.ReadFile(file)
	if strings.Count(string(b), "\n") != 2 || strings.Count(string(b), `"CONNECT"`) != 1 || strings.Count(string(b), `"GET"`) != 1 || strings.Count(string(b), `"event":"`+audit.EventAllowed+`"`) != 2 {
		t.Errorf("the audit after the watchdog finished, want the GET and the spliced tunnel, both allowed:\n%s", b)
	}
	// Podman learns of the exit a little later.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		data, err := c.ContainerInspect(context.Background(), g.Name)
		if err == nil && data.State != nil && !data.State.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gate still runs 5 s after KillSquid: %v %+v", err, data.State)
		}
	}
}
