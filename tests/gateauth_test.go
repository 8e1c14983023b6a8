package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// gatePorts reads a running session's front and TLS ports from its
// squid.conf (a's state is root-readable to the tests).
func gatePorts(t *testing.T, a *aisbUser) (front, tlsPort int) {
	t.Helper()
	var confs []string
	waitFor(2*time.Minute, func() bool {
		confs, _ = filepath.Glob(filepath.Join(a.state, "*", "sessions", "*", "gate", "squid.conf"))
		return len(confs) == 1
	})
	if len(confs) != 1 {
		t.Fatalf("found %d session squid.conf files", len(confs))
	}
	b, err := os.ReadFile(confs[0])
	if err != nil {
		t.Fatal(err)
	}
	port := func(name string) int {
		m := regexp.MustCompile(`(?m)^http_port 127\.0\.0\.1:(\d+) name=` + name + `\b`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("squid.conf has no http_port for %s", name)
		}
		p, _ := strconv.Atoi(string(m[1]))
		return p
	}
	return port("gate_front"), port("gate_tls")
}

// outsider is a local process that is not the session's sandbox: another
// user's (nobody), or the session user's own outside the sandbox.
type outsider struct {
	name string
	argv []string // prefix that runs a command as it
}

var outsiders = []outsider{
	{"another user", []string{"runuser", "-u", "nobody", "--"}},
	{"the same user outside the sandbox", []string{"runuser", "-u", testhost.User, "--"}},
}

// proxyStatus is what curl as o got from the gate at port for url: the
// CONNECT's status (000 for an http URL) and the response's (000 when
// there was none).
func proxyStatus(t *testing.T, o outsider, port int, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append(append([]string{}, o.argv...), "curl", "-sS", "-k", "-o", "/dev/null", "-m", "10", "-w", "%{http_connect} %{http_code}", "-x", fmt.Sprintf("http://127.0.0.1:%d", port))
	args = append(append(args, extra...), url)
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("curl as %s: %v", o.name, err)
	}
	return strings.TrimSpace(string(out))
}

// TestGateAnswersOnlyItsSandbox: while a session runs, another local user
// and the session's own user outside the sandbox are refused by both of
// the gate's ports, for HTTP and CONNECT, listed name or not, also from
// the hand-over's source address 127.0.0.3: the front answers 403; the TLS
// port (ssl-bump: squid answers every CONNECT there 200) gives their
// requests no answer; nothing of theirs reaches the upstream and no key is
// set for them; each refusal is in the audit. The
// control: the session's sandbox passes, key set, before and after, at
// the same time. On main before the gate authenticated its sandbox both
// ports answered them 200 and the upstream saw the session's key.
func TestGateAnswersOnlyItsSandbox(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, credentialConfig())
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	key := "REALKEY-" + stamp
	writeUserFile(t, filepath.Join(a.project, "inside.sh"), `
code() { curl -sS -o /dev/null -w '%{http_code}' "$1"; }
code https://api.allowed.test/sandbox-before-`+stamp+` >/project/before
# git asks its proxy for nothing before it sends the token (GIT_HTTP_PROXY_AUTHMETHOD).
git -c http.sslVerify=false ls-remote https://allowed.test/git-`+stamp+` >/dev/null 2>&1
touch /project/up
i=0; while [ ! -e /project/go ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
code https://api.allowed.test/sandbox-after-`+stamp+` >/project/after
`)
	envFile := filepath.Join(testhost.UserDir(t), "env")
	writeUserFile(t, envFile, "export TEST_API_KEY='"+key+"' TEST_BEARER='REALBEARER-"+stamp+"'\n")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argv := append([]string{"sh", "-c", ". " + envFile + " && exec \"$@\"", "sh"}, a.command(t, ctx, "run", "--harness", "shell", "--", "sh", "/project/inside.sh")...)
	cmd := testhost.UserCommand(ctx, argv...)
	cmd.Dir = a.project
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	mark := headersMark(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	if !waitFor(2*time.Minute, func() bool { _, err := os.Stat(filepath.Join(a.project, "up")); return err == nil }) {
		t.Fatalf("the sandbox never started its script:\n%s", out)
	}
	front, tlsPort := gatePorts(t, a)
	tried := 0
	for _, o := range outsiders {
		for _, c := range []struct {
			port  int
			url   string
			extra []string
			want  string // what the front answers; "" on the TLS port (below)
		}{
			{front, "https://api.allowed.test/outsider-front-" + stamp, nil, "403 000"},
			{front, "http://allowed.test/outsider-plain-" + stamp, nil, "000 403"},
			{tlsPort, "https://api.allowed.test/outsider-tls-" + stamp, nil, ""},
			{tlsPort, "https://unnamed.test/outsider-tls-unlisted-" + stamp, nil, ""},
			{tlsPort, "https://unnamed.test/outsider-bound-" + stamp, []string{"--interface", "127.0.0.3"}, ""},
			{tlsPort, "http://allowed.test/outsider-tls-plain-" + stamp, nil, ""},
		} {
			tried++
			got := proxyStatus(t, o, c.port, c.url, c.extra...)
			switch {
			case c.want != "" && got != c.want:
				t.Errorf("%s got %q from the gate's front (port %d) for %s, want %q (refused)", o.name, got, c.port, c.url, c.want)
			case c.want == "" && strings.HasSuffix(got, " 200"):
				// The TLS port has ssl-bump: squid answers every CONNECT
				// there 200 and ends the refused one at its TLS step, so
				// the request itself must get no answer.
				t.Errorf("%s got an answer %q from the gate's TLS port %d for %s %v", o.name, got, c.port, c.url, c.extra)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(a.project, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("aisb run: %v\n%s", err, out)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("aisb run did not end:\n%s", out)
	}
	// The control: the sandbox passed through the same gate before and
	// after the outsiders tried, with its key set by the gate.
	for _, f := range []string{"before", "after"} {
		b, _ := os.ReadFile(filepath.Join(a.project, f))
		if string(b) != "200" {
			t.Errorf("the sandbox's request %s the outsiders got %q, want 200\n%s", f, b, out)
		}
	}
	sawSandbox, sawGit := 0, false
	for _, r := range upstreamRequests(t, mark) {
		sawGit = sawGit || strings.HasPrefix(r.Path, "/git-"+stamp+"/info/refs")
		if strings.Contains(r.Path, "outsider-") {
			t.Errorf("an outsider's request reached the upstream: %+v", r)
		}
		if strings.Contains(r.Path, "sandbox-") && strings.HasSuffix(r.Path, stamp) {
			sawSandbox++
			if got := r.Headers["X-Api-Key"]; len(got) != 1 || got[0] != key {
				t.Errorf("the sandbox's request %s carried x-api-key %q, want the key set by the gate", r.Path, got)
			}
		}
	}
	if sawSandbox != 2 {
		t.Errorf("the upstream saw %d of the sandbox's 2 requests", sawSandbox)
	}
	if !sawGit {
		t.Error("git's request from the sandbox did not pass the gate")
	}
	refused := 0
	for _, e := range a.events(t) {
		if e.Rule == "not_sandbox" {
			refused++
		}
	}
	if refused < tried {
		t.Errorf("the audit has %d refusals of requests not from the sandbox, want at least %d (one per request tried)", refused, tried)
	}
}

// bumpedTunnel opens one TLS tunnel to api.allowed.test through the gate
// (which decrypts it: a credential host), sends each case's request on a
// tunnel of its own and prints the case's name and the first line of the
// answer.
const bumpedTunnel = `import base64, os, socket, ssl, sys
from urllib.parse import urlparse
u = urlparse(os.environ['HTTPS_PROXY'])
def tunnel():
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    auth = ''
    if u.username:
        auth = 'Proxy-Authorization: Basic ' + base64.b64encode((u.username + ':' + (u.password or '')).encode()).decode() + '\r\n'
    s.sendall(('CONNECT api.allowed.test:443 HTTP/1.1\r\nHost: api.allowed.test:443\r\n' + auth + '\r\n').encode())
    head = b''
    while b'\r\n\r\n' not in head:
        c = s.recv(1)
        if not c:
            break
        head += c
    if not head.startswith(b'HTTP/1.1 200'):
        raise SystemExit('tunnel refused: ' + head.split(b'\r\n')[0].decode())
    ctx = ssl.create_default_context(cafile=os.environ.get('SSL_CERT_FILE'))
    return ctx.wrap_socket(s, server_hostname='api.allowed.test')
stamp = sys.argv[1]
cases = [
    ('control', 'GET /bump-control-%s HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: close\r\n\r\n'),
    ('connect', 'CONNECT unnamed.test:443 HTTP/1.1\r\nHost: unnamed.test:443\r\n\r\n'),
    ('trace', 'TRACE /bump-trace-%s HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: close\r\n\r\n'),
    ('track', 'TRACK /bump-track-%s HTTP/1.1\r\nHost: api.allowed.test\r\nConnection: close\r\n\r\n'),
    ('otherhost', 'GET /bump-otherhost-%s HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n'),
    ('othercred', 'GET /bump-othercred-%s HTTP/1.1\r\nHost: www.allowed.test\r\nConnection: close\r\n\r\n'),
    ('absolute', 'GET https://unnamed.test/bump-absolute-%s HTTP/1.1\r\nHost: unnamed.test\r\nConnection: close\r\n\r\n'),
]
for name, req in cases:
    try:
        t = tunnel()
        t.sendall((req.replace('%s', stamp)).encode())
        line = b''
        while not line.endswith(b'\r\n'):
            c = t.recv(1)
            if not c:
                break
            line += c
        print(name, line.decode(errors='replace').strip() or 'closed')
    except Exception as e:
        print(name, 'error', type(e).__name__)
`

// TestBumpedTunnelRefusesOtherRequests: inside a tunnel the gate decrypts
// for a credential host, a CONNECT, TRACE or TRACK, and a request for any
// host but the tunnel's own are refused, each with its rule in the audit,
// and none reaches an upstream or has a key set. The control: a GET in
// the same kind of tunnel passes with the key set. On main before this
// test the CONNECT was audited "allowed" and TRACE reached the upstream
// with the real key.
func TestBumpedTunnelRefusesOtherRequests(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, credentialConfig())
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	key := "REALKEY-" + stamp
	writeUserFile(t, filepath.Join(a.project, "bumped.py"), bumpedTunnel)
	mark := headersMark(t)
	r := a.runEnv(t, []string{"TEST_API_KEY=" + key, "TEST_BEARER=REALBEARER-" + stamp}, "run", "--harness", "shell", "--", "python3", "/project/bumped.py", stamp)
	if r.Code != 0 {
		t.Fatalf("%s", r)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		name, answer, _ := strings.Cut(l, " ")
		got[name] = answer
	}
	if !strings.HasPrefix(got["control"], "HTTP/1.1 200") {
		t.Fatalf("control: a GET in the bumped tunnel got %q, want 200\n%s", got["control"], r)
	}
	for _, c := range []string{"connect", "trace", "track", "otherhost", "othercred", "absolute"} {
		if a, ok := got[c]; !ok || strings.HasPrefix(a, "HTTP/1.1 200") {
			t.Errorf("%s in the bumped tunnel got %q, want a refusal", c, a)
		}
	}
	for _, req := range upstreamRequests(t, mark) {
		if strings.Contains(req.Path, "bump-") && !strings.Contains(req.Path, "bump-control-") {
			t.Errorf("a request the gate should have refused reached the upstream: %+v", req)
		}
	}
	rules := map[string]int{}
	for _, e := range a.events(t) {
		rules[e.Rule]++
		if e.Event == "network_allowed" && e.Method == "CONNECT" && e.Host == "unnamed.test" {
			t.Errorf("the audit admits the CONNECT sent inside the bumped tunnel: %+v", e)
		}
	}
	if rules["bumped_method"] < 3 || rules["bumped_host"] < 3 {
		t.Errorf("audit rules %v: want bumped_method for CONNECT, TRACE and TRACK, bumped_host for the other hosts", rules)
	}
}
