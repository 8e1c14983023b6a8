// The credential tests and their helpers (the upstream's headers log, the
// gate-file check, the pi loop) in one file of about 440 lines: they
// share the user configuration and the test upstream's CA.

package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// credentialConfig is a user config with two credentials for hosts of the
// test upstream, whose CA the gate is told to trust for them.
func credentialConfig() string {
	return dnsConfig() + `allowed_hosts = ["allowed.test"]
upstream_ca = ["` + filepath.Join(testhost.StateDir, "ca.pem") + `"]

[[credentials]]
host = "api.allowed.test"
header = "x-api-key"
env = "TEST_API_KEY"

[[credentials]]
host = "www.allowed.test"
header = "authorization"
env = "TEST_BEARER"
prefix = "Bearer "
`
}

// upstreamRequest is one line of the test upstream's headers log.
type upstreamRequest struct {
	Scheme  string              `json:"scheme"`
	Host    string              `json:"host"`
	Path    string              `json:"path"`
	Headers map[string][]string `json:"headers"`
}

func upstreamRequests(t *testing.T, mark int64) []upstreamRequest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testhost.StateDir, "headers.log"))
	if err != nil {
		t.Fatalf("the test upstream's headers log: %v", err)
	}
	var out []upstreamRequest
	for _, l := range strings.Split(string(b[min(mark, int64(len(b))):]), "\n") {
		var r upstreamRequest
		if json.Unmarshal([]byte(l), &r) == nil && r.Path != "" {
			out = append(out, r)
		}
	}
	return out
}

func headersMark(t *testing.T) int64 {
	fi, err := os.Stat(filepath.Join(testhost.StateDir, "headers.log"))
	if err != nil {
		testhost.Skip(t, "the test upstream records no headers (%v); run tests/host/upstream.sh up", err)
	}
	return fi.Size()
}

// nodeConnect is a Node client that tunnels through the gate by hand and
// verifies the server with Node's own store plus NODE_EXTRA_CA_CERTS: the
// path an npm-installed harness takes.
const nodeConnect = `
const http = require('http'), tls = require('tls');
const gate = new URL(process.env.HTTPS_PROXY);
// The proxy URL's user and password prove the sandbox to its gate, as
// Node's own proxy agents send them.
const auth = 'Basic ' + Buffer.from(decodeURIComponent(gate.username) + ':' + decodeURIComponent(gate.password)).toString('base64');
http.request({host: gate.hostname, port: gate.port, method: 'CONNECT', path: 'api.allowed.test:443', headers: {'Proxy-Authorization': auth}})
  .on('connect', (res, sock) => {
    const t = tls.connect({socket: sock, servername: 'api.allowed.test'}, () => {
      t.write('GET /node HTTP/1.1\r\nHost: api.allowed.test\r\nx-api-key: ' + process.env.TEST_API_KEY + '\r\nConnection: close\r\n\r\n');
    });
    let body = ''; t.on('data', d => body += d);
    t.on('end', () => { console.log(body.split('\r\n')[0]); });
    t.on('error', e => { console.log('node tls error: ' + e.message); process.exit(1); });
  }).end();
`

// TestCredentials: a key configured as a credential reaches the upstream
// only from the gate; inside the sandbox its variable holds a placeholder,
// and the real value is nowhere the agent can look.
func TestCredentials(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, credentialConfig())
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	key, bearer := "REALKEY-"+stamp, "REALBEARER-"+stamp
	// The sandbox searches for the values by patterns that do not match
	// themselves, so the search cannot find its own arguments.
	keyRE, bearerRE := "R[E]ALKEY-"+stamp, "R[E]ALBEARER-"+stamp
	// Controls: the same searches find a value that is there, in the
	// project (a file) and in /proc (a variable of the script's own).
	controlRE := "C[O]NTROL-" + stamp
	writeUserFile(t, filepath.Join(a.project, "control.txt"), "CONTROL-"+stamp+"\n")
	writeUserFile(t, filepath.Join(a.project, "node-connect.js"), nodeConnect)
	cases := []scriptCase{
		{"env", `printenv TEST_API_KEY; printenv TEST_BEARER`},
		{"key", `curl -sS https://api.allowed.test/cred -H 'x-api-key: agent-sent' -H 'X-Api-Key: again'`},
		// No proxy: the relay carries it to the gate, which sets the key the same way.
		{"noproxy", `env -u https_proxy -u HTTPS_PROXY -u http_proxy -u HTTP_PROXY curl -sS --noproxy '*' https://api.allowed.test/cred-noproxy -H 'x-api-key: agent-sent'`},
		{"bearer", `curl -sS https://www.allowed.test/bearer -H 'Authorization: Bearer agent-sent'`},
		{"plainhttp", `curl -sS http://api.allowed.test/plain -H 'x-api-key: agent-sent'`},
		{"keepalive", `curl -sSv https://api.allowed.test/ka1 https://api.allowed.test/ka2 2>&1 | grep -c -i 're-using existing'`},
		{"bumpcert", `curl -sSv https://api.allowed.test/c 2>&1 | grep -i 'issuer:'`},
		{"splicecert", `curl -sSkv https://allowed.test/s 2>&1 | grep -i 'issuer:'`},
		{"sse", `curl -sSN https://api.allowed.test/sse | while read -r l; do [ -n "$l" ] && echo "$(date +%s%3N) $l"; done`},
		{"upload", `head -c 6000000 /dev/urandom >/tmp/big && sha256sum </tmp/big | cut -c1-64 && curl -sS --data-binary @/tmp/big https://api.allowed.test/upload`},
		{"node", `node /project/node-connect.js`},
		{"files", `grep -rIl -D skip --exclude-dir=proc --exclude-dir=sys -e '` + keyRE + `' -e '` + bearerRE + `' / 2>/dev/null; echo searched`},
		{"filesctl", `grep -rIl -D skip --exclude-dir=proc --exclude-dir=sys -e '` + controlRE + `' / 2>/dev/null | cat`},
		{"proc", `cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep -c -e '` + keyRE + `' -e '` + bearerRE + `'`},
		{"procctl", `CTL=C''ONTROL-` + stamp + ` sh -c 'cat /proc/[0-9]*/environ 2>/dev/null' | tr '\0' '\n' | grep -c -e '` + controlRE + `'`},
		{"cakey", `for i in $(seq 600); do [ -s /project/ca-needle ] && break; sleep 0.1; done; [ -s /project/ca-needle ] || exit 9; grep -rIl -D skip --exclude-dir=proc --exclude-dir=sys -f /project/ca-needle / 2>/dev/null; echo searched`},
		{"cafile", `echo $SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE $GIT_SSL_CAINFO $CURL_CA_BUNDLE; ls -l /etc/ssl/certs/ca-certificates.crt | cut -c1-10`},
		{"caw", `echo x >> /etc/ssl/certs/ca-certificates.crt`},
	}
	writeUserFile(t, filepath.Join(a.project, "creds.sh"), renderScript(cases)+"sleep 3\n")
	mark := headersMark(t)
	inspected := make(chan string, 1)
	go func() { inspected <- inspectSandboxes(t, a) }()
	gateFiles := make(chan gateFileCheck, 1)
	go func() { gateFiles <- checkGateFiles(a) }()
	r := a.runEnv(t, []string{"TEST_API_KEY=" + key, "TEST_BEARER=" + bearer}, "run", "--harness", "shell", "--", "sh", "/project/creds.sh")
	if r.Code != 0 {
		t.Fatalf("aisb run: %s", r)
	}
	res := parseResults(t, r.Stdout)
	want := func(name, sub string) {
		t.Helper()
		if !strings.Contains(res[name].out, sub) {
			t.Errorf("%s: %+v, want %q", name, res[name], sub)
		}
	}
	want("env", "aisb-placeholder-the-gate-sets-the-real-key aisb-placeholder-the-gate-sets-the-real-key")
	want("key", "aisb-upstream https host=api.allowed.test path=/cred")
	want("bearer", "aisb-upstream https host=www.allowed.test path=/bearer")
	want("noproxy", "aisb-upstream https host=api.allowed.test path=/cred-noproxy")
	want("keepalive", "1")
	want("bumpcert", "aisb session CA")
	want("splicecert", "aisb test upstream CA")
	want("node", "HTTP/1.1 200")
	want("files", "searched")
	if strings.TrimSpace(res["files"].out) != "searched" {
		t.Errorf("the real value is in a file the agent can read: %q", res["files"].out)
	}
	if strings.TrimSpace(res["proc"].out) != "0" {
		t.Errorf("the real value is in /proc: %+v", res["proc"])
	}
	if strings.TrimSpace(res["filesctl"].out) != "/project/control.txt" {
		t.Errorf("control: the file search did not find the control value in /project: %+v", res["filesctl"])
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(res["procctl"].out)); n < 1 {
		t.Errorf("control: the /proc search did not find a variable that is there: %+v", res["procctl"])
	}
	want("cafile", strings.Repeat("/etc/ssl/certs/ca-certificates.crt ", 5)+"-rw-r--r--")
	if res["caw"].code == 0 {
		t.Errorf("the agent could write the CA bundle: %+v", res["caw"])
	}
	// Several MB of request body arrive whole.
	up := strings.Fields(res["upload"].out)
	if len(up) < 3 || "sha256="+up[0] != up[2] || up[1] != "size=6000000" {
		t.Errorf("upload through the bump: %+v", res["upload"])
	}
	// The first event arrived while the upstream was still sending (its
	// last event is a second after the second, two after the first).
	checkSSE(t, res["sse"].out)
	// The gate's files, while it ran: squid.conf (which holds the values)
	// and the session CA's key readable by the user (the gate) alone; the
	// key is nowhere the sandbox can read (the search has its control in
	// "filesctl") and not in podman inspect.
	gf := <-gateFiles
	if gf.err != nil {
		t.Fatalf("the gate's files: %v", gf.err)
	}
	for name, m := range gf.modes {
		if m.Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: others can read it", name, m)
		}
	}
	if u, _ := user.Lookup(testhost.User); u == nil || strconv.Itoa(gf.owner) != u.Uid {
		t.Errorf("the gate's files are owned by uid %d, not the user's", gf.owner)
	}
	if res["cakey"].code != 0 || strings.TrimSpace(res["cakey"].out) != "searched" {
		t.Errorf("the session CA's key is in a file the agent can read: %+v", res["cakey"])
	}
	// podman inspect saw the sandbox (its placeholder), never the value.
	where := <-inspected
	if strings.Contains(where, gf.keyLine) {
		t.Errorf("podman inspect of the sandbox shows the session CA's key")
	}
	if !strings.Contains(where, "aisb-placeholder-the-gate-sets-the-real-key") {
		t.Errorf("podman inspect did not see the running sandbox: %.200s", where)
	}
	if strings.Contains(where, key) || strings.Contains(where, bearer) {
		t.Errorf("podman inspect of the sandbox shows the real value")
	}

	// Upstream: the real values, never what the agent sent, and none over
	// plain HTTP.
	seen := map[string]upstreamRequest{}
	for _, u := range upstreamRequests(t, mark) {
		seen[u.Scheme+" "+u.Path] = u
	}
	for path, hdr := range map[string][2]string{"/cred": {"X-Api-Key", key}, "/cred-noproxy": {"X-Api-Key", key}, "/bearer": {"Authorization", "Bearer " + bearer}, "/node": {"X-Api-Key", key}, "/ka2": {"X-Api-Key", key}} {
		u, ok := seen["https "+path]
		if !ok {
			t.Errorf("the upstream got no https %s", path)
			continue
		}
		if got := u.Headers[hdr[0]]; len(got) != 1 || got[0] != hdr[1] {
			t.Errorf("https %s arrived with %s = %q, want the real value only", path, hdr[0], got)
		}
	}
	if u, ok := seen["http /plain"]; !ok {
		t.Error("control: plain HTTP to the credential host did not arrive")
	} else if len(u.Headers["X-Api-Key"]) != 0 {
		t.Errorf("plain HTTP to a credential host carried x-api-key %q", u.Headers["X-Api-Key"])
	}

	// The audit names the credential, never its value; the session's files
	// (squid.conf held the values, the gate directory the CA key) are gone.
	events := a.events(t)
	creds := map[string]bool{}
	for _, e := range events {
		if e.Rule == audit.RuleCredential {
			creds[e.Credential] = true
		}
	}
	if !creds["TEST_API_KEY"] || !creds["TEST_BEARER"] {
		t.Errorf("the audit does not name the credentials: %+v", events)
	}
	filepath.Walk(a.state, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte(key)) || bytes.Contains(b, []byte(bearer)) {
				t.Errorf("%s holds a real value after the session", p)
			}
			if strings.HasSuffix(p, "ca.key") || strings.HasSuffix(p, "squid.conf") {
				t.Errorf("%s outlived its session", p)
			}
		}
		return nil
	})
}

// TestCredentialsPiHarness: the pi harness starts in a sandbox that trusts
// the session CA and runs one real agent loop (harness_test.go) against the
// test upstream's scripted model, with Node's own TLS through the bump: the
// key arrives from the gate, the sandbox held the placeholder, and pi's
// write tool left its file in the project.
func TestCredentialsPiHarness(t *testing.T) {
	harnessLoop(t, loopCases["pi"])
}

// gateFileCheck is what checkGateFiles saw of a running session's gate.
type gateFileCheck struct {
	modes   map[string]os.FileMode // squid.conf, tls/ and every file in it
	owner   int
	keyLine string // a line of the session CA's key (key material, not the PEM's fixed prefix)
	err     error
}

// checkGateFiles waits for the session's gate directory, records the modes
// of its private files, and writes a pattern for a line of the CA key to
// the project's ca-needle (in a form that does not match itself) for the
// sandbox to search for.
func checkGateFiles(a *aisbUser) gateFileCheck {
	var keys []string
	// The gate writes its TLS files before squid.conf: wait for both.
	testhost.WaitFor(2*time.Minute, func() error {
		keys, _ = filepath.Glob(filepath.Join(a.state, "*", "sessions", "*", "gate", "tls", "ca.key"))
		if err := nonEmpty(keys); err != nil {
			return err
		}
		_, err := os.Stat(filepath.Join(filepath.Dir(filepath.Dir(keys[0])), "squid.conf"))
		return err
	})
	if len(keys) != 1 {
		return gateFileCheck{err: fmt.Errorf("found %d session CA keys", len(keys))}
	}
	tlsDir := filepath.Dir(keys[0])
	out := gateFileCheck{modes: map[string]os.FileMode{}}
	paths := []string{filepath.Join(filepath.Dir(tlsDir), "squid.conf"), tlsDir}
	files, _ := filepath.Glob(filepath.Join(tlsDir, "*"))
	for _, p := range append(paths, files...) {
		fi, err := os.Stat(p)
		if err != nil {
			return gateFileCheck{err: err}
		}
		out.modes[strings.TrimPrefix(p, a.state)] = fi.Mode()
		out.owner = int(fi.Sys().(*syscall.Stat_t).Uid)
	}
	b, err := os.ReadFile(keys[0])
	if err != nil {
		return gateFileCheck{err: err}
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 3 || len(lines[2]) < 16 {
		return gateFileCheck{err: fmt.Errorf("the CA key is not a PEM of several lines")}
	}
	out.keyLine = lines[2]
	needle := "[" + out.keyLine[:1] + "]" + regexp.QuoteMeta(out.keyLine[1:]) + "\n"
	if err := os.WriteFile(filepath.Join(a.project, "ca-needle"), []byte(needle), 0o644); err != nil {
		return gateFileCheck{err: err}
	}
	if u, err := user.Lookup(testhost.User); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		os.Chown(filepath.Join(a.project, "ca-needle"), uid, gid)
	}
	// squid's certificate store once a bump has made a certificate and its
	// key there (the script's "key" case): what squid's helper writes.
	var generated []string
	testhost.WaitFor(time.Minute, func() error {
		generated, _ = filepath.Glob(filepath.Join(tlsDir, "certs", "certs", "*"))
		return nonEmpty(generated)
	})
	if len(generated) == 0 {
		return gateFileCheck{err: fmt.Errorf("no certificate was generated in %s", filepath.Join(tlsDir, "certs"))}
	}
	store, _ := filepath.Glob(filepath.Join(tlsDir, "certs", "*"))
	for _, p := range append(store, generated...) {
		if fi, err := os.Stat(p); err == nil {
			out.modes[strings.TrimPrefix(p, a.state)] = fi.Mode()
		}
	}
	return out
}

// TestCredentialUpstreamUnverified: without the upstream's CA in
// network.upstream_ca the gate refuses to send the key to it.
func TestCredentialUpstreamUnverified(t *testing.T) {
	parallel(t)
	cfg := strings.Replace(credentialConfig(), `upstream_ca = ["`+filepath.Join(testhost.StateDir, "ca.pem")+`"]`, "", 1)
	a := newAisb(t, testBaseImage(t), cfg)
	mark := headersMark(t)
	r := a.runEnv(t, []string{"TEST_API_KEY=REALKEY-unverified", "TEST_BEARER=x"}, "run", "--harness", "shell", "--",
		"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "https://api.allowed.test/unverified")
	if r.Stdout != "503" {
		t.Errorf("an upstream the host does not trust: %s", r)
	}
	for _, u := range upstreamRequests(t, mark) {
		if u.Path == "/unverified" {
			t.Errorf("the request reached an upstream whose certificate did not verify: %+v", u)
		}
	}
	var rules []string
	for _, e := range a.events(t) {
		rules = append(rules, e.Rule)
	}
	if !slices.Contains(rules, audit.RuleUpstream) {
		t.Errorf("audit rules %v, want %s", rules, audit.RuleUpstream)
	}
}

// checkSSE reads "CLIENTMS data: EVENT SERVERMS" lines.
func checkSSE(t *testing.T, out string) {
	t.Helper()
	f := strings.Fields(out)
	// first: f[0] client ms, f[1] "data:", f[2] "first", f[3] server ms; then second, last.
	if len(f) != 12 || f[2] != "first" || f[10] != "last" {
		t.Errorf("SSE through the bump: %q", out)
		return
	}
	gotFirst, _ := strconv.ParseInt(f[0], 10, 64)
	sentLast, _ := strconv.ParseInt(f[11], 10, 64)
	if gotFirst >= sentLast-1000 {
		t.Errorf("the first event arrived at %d, the last was sent at %d: the bump buffered the stream", gotFirst, sentLast)
	}
}

// inspectSandboxes waits (up to two minutes: the image may be built first)
// for a running sandbox of a's sessions and returns `podman inspect` of it,
// as text. Only a's: other tests' sandboxes may be running.
func inspectSandboxes(t *testing.T, a *aisbUser) string {
	var names []string
	if testhost.WaitFor(2*time.Minute, func() error {
		names = a.containers(t, "label="+engine.LabelKind+"=sandbox", "status=running")
		return nonEmpty(names)
	}) != nil {
		return "no sandbox was running to inspect"
	}
	return testhost.Podman(t, append([]string{"inspect"}, names...)...).Stdout
}

// nonEmpty is WaitFor's condition that a glob or listing found something.
func nonEmpty(found []string) error {
	if len(found) == 0 {
		return errNotYet
	}
	return nil
}

// TestCredentialsStayOutOfProjects: a project's .aisb.toml, trusted or not,
// cannot add a credential or an upstream CA.
func TestCredentialsStayOutOfProjects(t *testing.T) {
	parallel(t)
	a := newAisb(t, "", dnsConfig())
	for _, body := range []string{
		"version = 1\n[[credentials]]\nhost = \"evil.test\"\nheader = \"x-api-key\"\nenv = \"ANTHROPIC_API_KEY\"\n",
		"version = 1\n[network]\nupstream_ca = [\"/tmp/evil.pem\"]\n",
	} {
		writeUserFile(t, filepath.Join(a.project, ".aisb.toml"), body)
		for _, trusted := range []bool{false, true} {
			if trusted {
				// The hash of the content reviewed: without a terminal,
				// trust needs it.
				sum := sha256.Sum256([]byte(body))
				if r := a.run(t, "trust", "--sha256", hex.EncodeToString(sum[:])); r.Code != 0 {
					t.Fatalf("aisb trust: %s", r)
				}
			}
			r := a.runEnv(t, []string{"ANTHROPIC_API_KEY=x"}, "run", "--harness", "shell", "--", "true")
			if r.Code != 78 || !strings.Contains(r.Stderr, "can never") {
				t.Errorf("trusted=%v %q: %s", trusted, body, r)
			}
		}
	}
}
