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

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// The gate is started while the sandbox is created, and finished by the
// session's watchdog after aisb returns. These tests hold that to what it
// must not give up: the agent's first request finds the gate ready, and
// the audit is complete right after aisb's exit.

// TestFirstRequestFindsTheGate: the agent's very first request, sent the
// instant the command starts, goes out through the gate, in every one of
// several sessions, with the user's Podman service and with aisb's own one
// (each session's gate start overlaps its sandbox's creation). Every other
// first request is HTTPS: its tunnel is handed to the gate's TLS port, which
// squid must have found up (before that it fails such a tunnel with 500).
// The control shows that a request to a port where nothing listens fails at
// once, so a gate not yet listening could not pass unseen.
func TestFirstRequestFindsTheGate(t *testing.T) {
	parallel(t)
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
			first := `exec probe http-proxy "$HTTP_PROXY" http://allowed.test` + path
			if i%2 == 1 {
				// The sandbox does not trust the test upstream's CA: what
				// matters is that the tunnel is spliced through to it.
				first = `exec curl -sSk -o /dev/null -w "status %{http_code}" https://allowed.test` + path
			}
			r := a.run(t, "run", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c", first)
			if r.Code != 0 || !strings.Contains(r.Stdout, "status 200") || !upstreamSaw(t, path) {
				t.Errorf("aisb's own service %t, session %d: the first request did not get through: %s", own, i, r)
			}
		}
		allowed := 0
		for _, e := range a.events(t) {
			if e.Event == audit.EventAllowed && strings.HasPrefix(e.Host, "allowed.test") {
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
		fmt.Sprintf(`probe tcp "${HTTP_PROXY##*@}" >/dev/null; echo gate=$?; h=${HTTP_PROXY##*@}; exec probe tcp ${h%%:*}:%d`, closed))
	if r.Code != 1 || !strings.Contains(r.Stdout, "gate=0") || !strings.Contains(r.Stdout, "refused") || time.Since(start) > time.Minute {
		t.Errorf("control: a connection to a port nothing listens on, which the table admits, must be refused at once: %s", r)
	}
}

// TestAuditCompleteAfterLastMomentTunnel: the agent opens a CONNECT tunnel
// through the gate, spliced by its TLS port after a real handshake, and the
// session ends while it is still open (squid logs a tunnel only when it
// closes: on the TLS port, once the front's connection to it closes). Within
// a second of aisb's exit its line is in the session's audit, `aisb audit`
// run at once shows it without a warning, and soon after the gate, the
// watchdog and the marker are gone.
func TestAuditCompleteAfterLastMomentTunnel(t *testing.T) {
	a := newAisb(t, testBaseImage(t), dnsConfig())
	// A second process holds the tunnel; the command exits as soon as the
	// tunnel is up, which ends the session and kills the holder.
	writeUserFile(t, filepath.Join(a.project, "tunnel.py"), `import base64, os, socket, ssl, sys, time
from urllib.parse import urlparse
u = urlparse(os.environ["HTTP_PROXY"])
s = socket.create_connection((u.hostname, u.port))
# The proxy URL's user and password prove the sandbox to its gate.
auth = base64.b64encode((u.username + ":" + u.password).encode()).decode()
s.sendall(("CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\nProxy-Authorization: Basic " + auth + "\r\n\r\n").encode())
print(s.recv(200).split(b"\r\n")[0].decode(), flush=True)
# The sandbox does not trust the test upstream's CA; the handshake is what
# makes the TLS port splice the tunnel.
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
tls = ctx.wrap_socket(s, server_hostname="allowed.test")
print("tls", tls.version(), flush=True)
open("/project/tunnel-open", "w").close()
time.sleep(600)
`)
	r := a.run(t, "run", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c",
		`python3 /project/tunnel.py & i=0; while [ ! -e /project/tunnel-open ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done; echo up`)
	exited := time.Now()
	if r.Code != 0 || !strings.Contains(r.Stdout, "200 Connection established") || !strings.Contains(r.Stdout, "tls TLS") || !strings.Contains(r.Stdout, "up") {
		t.Fatalf("run: %s", r)
	}
	dir := filepath.Join(a.state, "aisb", "audit")
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("audit files: %v", files)
	}
	session := strings.TrimSuffix(filepath.Base(files[0]), ".jsonl")
	isTunnel := func(line string) bool {
		var e audit.Event
		return json.Unmarshal([]byte(line), &e) == nil && e.Method == "CONNECT" && e.Host == "allowed.test" && e.Port == 443 && e.Event == audit.EventAllowed
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
	if err := audit.AuditState(dir, session); err != nil {
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

// TestGateSecretsGoAfterHandoff: a credential session's gate holds secrets
// while it runs (squid.conf with the key's value, the session CA's key);
// aisb hands the gate to the session's watchdog at the end, and by the time
// the watchdog has completed the audit those files are gone, the access log
// stays, no file of aisb's holds the key, and the gate is removed.
func TestGateSecretsGoAfterHandoff(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), credentialConfig())
	mark := headersMark(t)
	key := fmt.Sprintf("REALKEY-handoff-%d", time.Now().UnixNano())
	// The session lasts until the test has seen the session CA's key on the
	// host (the control that there was something to remove).
	seen := make(chan []string, 1)
	ran := make(chan struct{})
	go func() {
		var keys []string
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && len(keys) == 0; time.Sleep(50 * time.Millisecond) {
			keys, _ = filepath.Glob(filepath.Join(a.state, "*", "sessions", "*", "gate", "tls", "ca.key"))
			select {
			case <-ran:
				deadline = time.Now()
			default:
			}
		}
		os.WriteFile(filepath.Join(a.project, "seen"), nil, 0o644)
		seen <- keys
	}()
	r := a.runEnv(t, []string{"TEST_API_KEY=" + key, "TEST_BEARER=x"}, "run", "--harness", "shell", "--", "sh", "-c",
		`i=0; while [ ! -e /project/seen ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
exec curl -sS -o /dev/null -w "%{http_code}" https://api.allowed.test/handoff-secrets`)
	close(ran)
	keys := <-seen
	if r.Code != 0 || r.Stdout != "200" {
		t.Fatalf("run: %s", r)
	}
	if len(keys) != 1 {
		t.Fatalf("control: %d session CA keys seen while the session ran, want 1", len(keys))
	}
	got := false
	for _, u := range upstreamRequests(t, mark) {
		if u.Path == "/handoff-secrets" {
			got = len(u.Headers["X-Api-Key"]) == 1 && u.Headers["X-Api-Key"][0] == key
		}
	}
	if !got {
		t.Errorf("control: the gate did not set the key on the request")
	}
	gateDir := filepath.Dir(filepath.Dir(keys[0]))
	sessionDir := filepath.Dir(gateDir)
	session := filepath.Base(sessionDir)
	if _, err := os.Lstat(filepath.Join(sessionDir, "finish.json")); err != nil {
		t.Errorf("aisb did not hand the gate to the watchdog: %v", err)
	}
	a.events(t) // waits until the watchdog has completed the audit
	for _, p := range gate.SecretPaths(gateDir) {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there once the watchdog completed the audit (%v)", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(gateDir, "access.log")); err != nil {
		t.Errorf("the gate's access log went with its secrets: %v", err)
	}
	filepath.Walk(a.state, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), key) {
				t.Errorf("%s holds the key after the session", p)
			}
		}
		return nil
	})
	mine := func() []string {
		r := testhost.Podman(t, "ps", "-a", "--filter", "label="+engine.LabelSession+"="+session, "--format", "{{.Names}}")
		return strings.Fields(r.Stdout)
	}
	if !waitFor(5*time.Second, func() bool { return len(mine()) == 0 }) {
		t.Errorf("5 s after the session its containers remain: %v", mine())
	}
}

// TestShortSessionGateEndsCleanly: a session whose command ends at once
// leaves its gate to the watchdog while squid may still be starting its
// helper. Its squid must not die on a helper program aisb already removed
// (squid's FATAL exit would drop what it had not yet logged): the helper's
// copy goes with the gate, once the watchdog has removed it. The control is
// squid's own word in cache.log that it started and listened. These short
// sessions are also where aisb's hold of the TLS port (gate/hold.go) must
// have answered squid's first check (the trace says so), in one session
// at least: the kernel may hand the check to squid's own listener instead.
func TestShortSessionGateEndsCleanly(t *testing.T) {
	a := newAisb(t, testBaseImage(t), dnsConfig())
	held := 0
	for i := 0; i < 4; i++ {
		r := a.runEnv(t, []string{"AISB_TRACE=1"}, "run", "--allow", "allowed.test", "--harness", "shell", "--", "true")
		if r.Code != 0 || !strings.Contains(r.Stderr, "gate ready") {
			t.Fatalf("run %d: %s", i, r)
		}
		if strings.Contains(r.Stderr, "TLS port checked at aisb's hold") {
			held++
		}
	}
	if held == 0 {
		t.Error("in none of 4 sessions did aisb's hold of the TLS port answer squid's check")
	}
	a.events(t) // every audit complete: the watchdogs are at their last steps
	sessions, _ := filepath.Glob(filepath.Join(a.state, "aisb", "sessions", "*"))
	if len(sessions) != 4 {
		t.Fatalf("sessions: %v", sessions)
	}
	for _, s := range sessions {
		id := filepath.Base(s)
		gone := func() bool {
			r := testhost.Podman(t, "ps", "-a", "--filter", "label="+engine.LabelSession+"="+id, "--format", "{{.Names}}")
			return strings.TrimSpace(r.Stdout) == ""
		}
		if !waitFor(10*time.Second, gone) {
			t.Errorf("session %s: its containers remain 10 s after it", id)
			continue
		}
		if !waitFor(2*time.Second, func() bool { _, err := os.Lstat(filepath.Join(s, "ask")); return os.IsNotExist(err) }) {
			t.Errorf("session %s: the helper's copy outlived the gate", id)
		}
		b, err := os.ReadFile(filepath.Join(s, "gate", "cache.log"))
		if err != nil || !strings.Contains(string(b), "listening port: gate_tls") {
			t.Errorf("control: session %s's cache.log does not show squid listening (%v):\n%s", id, err, b)
			continue
		}
		if strings.Contains(string(b), "FATAL") || strings.Contains(string(b), "ipcCreate") {
			t.Errorf("session %s: squid died before the watchdog ended it:\n%s", id, b)
		}
	}
}
