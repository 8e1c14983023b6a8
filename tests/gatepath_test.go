package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/engine"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// The gate is started while the sandbox is created, and finished by the
// session's watchdog after aisb returns. These tests hold that to what it
// must not give up: the agent's first request finds the gate listening, and
// the audit is complete right after aisb's exit.

// TestFirstRequestFindsTheGate: the agent's very first request, sent the
// instant the command starts, goes out through the gate, in every one of
// several sessions, with the user's Podman service and with aisb's own one
// (each session's gate start overlaps its sandbox's creation). The control
// shows that a request to a port where nothing listens fails at once, so a
// gate not yet listening could not pass unseen.
func TestFirstRequestFindsTheGate(t *testing.T) {
	base := testBaseImage(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there
	for _, own := range []bool{false, true} {
		a := newAisb(t, base, dnsConfig())
		a.private = own // no CONTAINER_HOST: aisb reaches Podman its own way
		for i := 0; i < 4; i++ {
			path := fmt.Sprintf("/first-%d-%t-%d", i, own, time.Now().UnixNano())
			r := a.run(t, "run", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c",
				`exec probe http-proxy "$HTTP_PROXY" http://allowed.test`+path)
			if r.Code != 0 || !strings.Contains(r.Stdout, "status 200") || !upstreamSaw(t, path) {
				t.Errorf("aisb's own service %t, session %d: the first request did not get through: %s", own, i, r)
			}
		}
		allowed := 0
		for _, e := range a.events(t) {
			if e.Event == gate.EventAllowed && strings.HasPrefix(e.Host, "allowed.test") {
				allowed++
			}
		}
		if allowed != 4 {
			t.Errorf("aisb's own service %t: %d allowed requests in the audit, want 4", own, allowed)
		}
	}
	a := newAisb(t, base, dnsConfig())
	start := time.Now()
	r := a.run(t, "run", "--allow", "allowed.test", "--host-port", fmt.Sprint(closed), "--harness", "shell", "--", "sh", "-c",
		fmt.Sprintf(`probe tcp "${HTTP_PROXY#http://}" >/dev/null; echo gate=$?; h=${HTTP_PROXY#http://}; exec probe tcp ${h%%:*}:%d`, closed))
	if r.Code != 1 || !strings.Contains(r.Stdout, "gate=0") || !strings.Contains(r.Stdout, "refused") || time.Since(start) > time.Minute {
		t.Errorf("control: a connection to a port nothing listens on, which the table admits, must be refused at once: %s", r)
	}
}

// TestAuditCompleteAfterLastMomentTunnel: the agent opens a CONNECT tunnel
// through the gate and the session ends while it is still open (squid logs a
// tunnel only when it closes). Within a second of aisb's exit its line is
// in the session's audit, `aisb audit` run at once shows it without a
// warning, and soon after the gate, the watchdog and the marker are gone.
func TestAuditCompleteAfterLastMomentTunnel(t *testing.T) {
	a := newAisb(t, testBaseImage(t), dnsConfig())
	// A second process holds the tunnel; the command exits as soon as the
	// tunnel is up, which ends the session and kills the holder.
	writeUserFile(t, filepath.Join(a.project, "tunnel.py"), `import os, socket, sys, time
h, p = os.environ["HTTP_PROXY"][len("http://"):].rsplit(":", 1)
s = socket.create_connection((h, int(p)))
s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
print(s.recv(200).split(b"\r\n")[0].decode(), flush=True)
open("/project/tunnel-open", "w").close()
time.sleep(600)
`)
	r := a.run(t, "run", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c",
		`python3 /project/tunnel.py & while [ ! -e /project/tunnel-open ]; do sleep 0.01; done; echo up`)
	exited := time.Now()
	if r.Code != 0 || !strings.Contains(r.Stdout, "200 Connection established") || !strings.Contains(r.Stdout, "up") {
		t.Fatalf("run: %s", r)
	}
	dir := filepath.Join(a.state, "aisb", "audit")
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("audit files: %v", files)
	}
	session := strings.TrimSuffix(filepath.Base(files[0]), ".jsonl")
	isTunnel := func(line string) bool {
		var e gate.Event
		return json.Unmarshal([]byte(line), &e) == nil && e.Method == "CONNECT" && e.Host == "allowed.test" && e.Port == 443 && e.Event == gate.EventAllowed
	}
	var inAudit time.Duration
	for {
		b, _ := os.ReadFile(files[0])
		if anyLine(string(b), isTunnel) {
			inAudit = time.Since(exited)
			break
		}
		if time.Since(exited) > 5*time.Second {
			t.Fatalf("5 s after aisb exited the tunnel is not in the audit:\n%s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if inAudit > time.Second {
		t.Errorf("the tunnel's line reached the audit %s after aisb exited (want within 1 s)", inAudit)
	}
	out := a.run(t, "audit", "--session", session, "--json")
	if out.Code != 0 || !anyLine(out.Stdout, isTunnel) || out.Stderr != "" {
		t.Errorf("aisb audit right after the session: %s", out)
	}
	// This session's own containers: other users of the test host may
	// have theirs.
	mine := func() []string {
		r := testhost.Podman(t, "ps", "-a", "--filter", "label="+engine.LabelSession+"="+session, "--format", "{{.Names}}")
		return strings.Fields(r.Stdout)
	}
	if !waitFor(5*time.Second, func() bool { return len(mine()) == 0 }) {
		t.Errorf("5 s after the session its containers remain: %v", mine())
	}
	if !waitFor(5*time.Second, func() bool { return findProcess(a.bin, "internal-watchdog") == 0 }) {
		t.Error("the session's watchdog still runs 5 s after the session")
	}
	if err := gate.AuditState(dir, session); err != nil {
		t.Errorf("the audit is not marked complete: %v", err)
	}
	t.Logf("the tunnel's line was in the audit %s after aisb exited", inAudit.Round(time.Millisecond))
}

func anyLine(s string, f func(string) bool) bool {
	for _, l := range strings.Split(s, "\n") {
		if f(l) {
			return true
		}
	}
	return false
}
