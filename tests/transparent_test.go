package tests

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// The transparent path: programs that ignore the proxy variables resolve
// names through the sandbox's relay and reach what the gate allows, by
// name, through it. tp.test (the upstream) is allowed, tprefused.test is
// not; both are reserved for these tests, so that the upstream's DNS log
// can show that nothing but the gate asks for a name.

type timedCase struct {
	name string
	argv string
	want string // "ok": exit 0; "refused": non-zero, fast; "403": non-zero with the gate's 403
	// match, when set, must occur in the case's output.
	match string
}

// renderTimed is renderScript with each case's time: RESULT NAME CODE ms=N OUTPUT.
func renderTimed(cases []timedCase) string {
	var b bytes.Buffer
	b.WriteString("#!/bin/sh\n")
	for _, c := range cases {
		fmt.Fprintf(&b, "t0=$(date +%%s%%N); out=$(%s 2>&1); code=$?; ms=$(( ($(date +%%s%%N) - t0) / 1000000 )); "+
			"printf 'RESULT %%s %%d ms=%%d %%s\\n' %q \"$code\" \"$ms\" \"$(printf %%s \"$out\" | tr '\\n' ' ' | cut -c1-300)\"\n", c.argv, c.name)
	}
	return b.String()
}

var msRE = regexp.MustCompile(`^ms=(\d+) `)

// refusedAtOnce is how long a refusal may take on this loaded machine; a
// drop would take the probe's whole timeout (and curl's 10 s).
const refusedAtOnce = 3 * time.Second

func checkTimed(t *testing.T, cases []timedCase, got map[string]caseResult) {
	t.Helper()
	for _, c := range cases {
		res, ok := got[c.name]
		if !ok {
			t.Errorf("%s: no result", c.name)
			continue
		}
		var ms int
		if m := msRE.FindStringSubmatch(res.out); m != nil {
			ms, _ = strconv.Atoi(m[1])
		}
		switch {
		case c.want == "ok" && res.code != 0:
			t.Errorf("%s: failed, want it to work: %d %s", c.name, res.code, res.out)
		case c.want == "refused" && res.code == 0:
			t.Errorf("%s: ESCAPED, want refused: %s", c.name, res.out)
		case c.want == "refused" && time.Duration(ms)*time.Millisecond > refusedAtOnce:
			t.Errorf("%s: refused after %d ms, want at once (a reset or ICMP, not a timeout): %s", c.name, ms, res.out)
		case c.want == "403" && (res.code == 0 || !strings.Contains(res.out, "403")):
			t.Errorf("%s: want the gate's 403, got %d %s", c.name, res.code, res.out)
		case c.match != "" && !strings.Contains(res.out, c.match):
			t.Errorf("%s: output lacks %q: %s", c.name, c.match, res.out)
		}
	}
}

// TestTransparentPath: one session runs every case as a script. The
// controls: the upstream answers 80, 443 and DNS from a plain container,
// its DNS log records a plain container's query, and the same refused
// targets are reachable there (so a refusal inside is the sandbox's).
func TestTransparentPath(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	up := testhost.UpstreamAddr
	plainControl(t, base, "http", "http://"+up+"/")
	plainControl(t, base, "http", "https://"+up+"/")
	plainControl(t, base, "udp", up+":9999")
	plainControl(t, base, "tcp", up+":22")
	ctlMark := testhost.DNSMark(t)
	plainControl(t, base, "dns", up, "tp.test")
	if !containsName(testhost.DNSQueries(t, ctlMark), "tp.test") {
		t.Fatal("control: the upstream's DNS log did not record a plain container's query for tp.test")
	}

	a := newAisb(t, base, dnsConfig())
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	p := func(s string) string { return "/tp-" + s + "-" + nonce }
	noproxy := "env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY "
	mapped := `$(getent ahostsv4 tp.test | awk 'NR==1 {print $1}')`
	// talk ADDR PORT exits 0 only when something answers what it sends:
	// the relay accepts every redirected connection, then resets those
	// the gate refused.
	talk := `python3 -c 'import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), 10); s.settimeout(10); s.sendall(b"SSH-2.0-x\r\n"); d=s.recv(64); print("got", d); sys.exit(0 if d else 1)' `
	cases := []timedCase{
		// Names resolve inside, to the mapped range; /etc/hosts still answers first.
		{"getent", "getent hosts tp.test", "ok", " tp.test"},
		{"getent-range", `getent ahostsv4 tp.test | awk 'NR==1 {print $1}' | grep -E '^198\.(18|19)\.'`, "ok", ""},
		{"getent-refused-name", "getent hosts x" + nonce + ".tprefused.test", "ok", "tprefused.test"},
		{"etc-hosts", "getent hosts localhost", "ok", "localhost"},
		{"no-aaaa", `python3 -c 'import socket,sys; sys.exit(len(socket.getaddrinfo("tp.test", 443, socket.AF_INET6)))'`, "refused", ""},
		{"ptr", "getent hosts " + mapped, "ok", "tp.test"},
		{"dns-any-server", "probe dns " + up + " x" + nonce + ".tprefused.test", "ok", "answers=1"},
		{"dns-tcp-any-server", "probe dns-tcp " + up + " y" + nonce + ".tprefused.test", "ok", "answers=1"},
		// Allowed name, no proxy, each kind of client.
		{"curl-443", noproxy + "curl -sSk --max-time 20 -o /dev/null -w 'status %{http_code}' --noproxy '*' https://tp.test" + p("curl443"), "ok", "status 200"},
		{"curl-80", noproxy + "curl -sS --max-time 20 -o /dev/null -w 'status %{http_code}' --noproxy '*' http://tp.test" + p("curl80"), "ok", "status 200"},
		{"python-socket", noproxy + `python3 -c 'import socket; s=socket.create_connection(("tp.test", 80), 20); s.sendall(b"GET ` + p("py") + ` HTTP/1.1\r\nHost: tp.test\r\n\r\n"); print(s.recv(64))'`, "ok", "200"},
		{"go-http", noproxy + "probe http http://tp.test" + p("go80"), "ok", ""},
		{"go-https", noproxy + "probe http https://tp.test" + p("go443"), "ok", ""},
		{"node-fetch", noproxy + `node -e 'fetch("http://tp.test` + p("node") + `").then(r => { console.log("status", r.status); process.exit(r.status == 200 ? 0 : 1) }, e => { console.log(String(e.cause || e)); process.exit(1) })'`, "ok", "status 200"},
		{"node-lookup", `node -e 'require("dns").lookup("tp.test", (e, a) => { console.log(e || a); process.exit(e ? 1 : 0) })'`, "ok", "198."},
		// The proxy path still works beside it.
		{"proxy-path", `probe http-proxy "$HTTP_PROXY" http://tp.test` + p("proxy"), "ok", ""},
		// Refused, at once: an unlisted name, an internal address behind an
		// allowed name, ports the gate does not admit, IP literals, UDP.
		{"unlisted-443", noproxy + "curl -sSk --max-time 10 --noproxy '*' https://tprefused.test/", "refused", ""},
		{"unlisted-80", noproxy + "curl -sSf --max-time 10 --noproxy '*' http://tprefused.test/", "403", ""},
		{"internal-80", noproxy + "curl -sSf --max-time 10 --noproxy '*' http://private.test/", "403", ""},
		{"ssh-host-22", talk + mapped + " 22", "ok", "SSH-"},
		{"port-22-not-ssh-host", talk + `$(getent ahostsv4 private.test | awk 'NR==1 {print $1}') 22`, "refused", ""},
		{"port-8080", "probe tcp " + mapped + ":8080", "refused", ""},
		{"ip-literal-443", "probe tcp " + up + ":443", "refused", ""},
		{"ip-literal-80", noproxy + "curl -sS --max-time 10 --noproxy '*' http://" + up + "/", "refused", ""},
		{"unmapped-in-range", talk + "198.19.255.254 443", "refused", ""},
		{"udp", "probe udp " + up + ":9999", "refused", ""},
		{"quic-to-mapped", "probe udp " + mapped + ":443", "refused", ""},
	}
	writeUserFile(t, a.project+"/tp.sh", renderTimed(cases))
	mark := testhost.DNSMark(t)
	start := time.Now()
	r := a.run(t, "run", "--allow", "tp.test", "--allow", "private.test", "--allow-ssh", "tp.test", "--harness", "shell", "--", "sh", "/project/tp.sh")
	t.Logf("the transparent session took %s", time.Since(start).Round(time.Millisecond))
	if r.Code != 0 {
		t.Fatalf("session: %s", r)
	}
	checkTimed(t, cases, parseResults(t, r.Stdout))
	for _, s := range []string{"curl443", "curl80", "py", "go80", "go443", "node", "proxy"} {
		if !upstreamSaw(t, p(s)) {
			t.Errorf("the upstream never saw %s", p(s))
		}
	}
	// Nothing the sandbox asked for reached a resolver: not the refused
	// names, not the relay's probe; the gate asked only for allowed ones.
	for _, q := range testhost.DNSQueries(t, mark) {
		if strings.Contains(q, "tprefused.test") || strings.Contains(q, "aisb.invalid") {
			t.Errorf("the upstream's resolver was asked for %q", q)
		}
	}
	// Every refusal the gate made is audited, with the name asked for.
	rules := map[string]int{}
	for _, e := range a.events(t) {
		if e.Event == audit.EventBlocked || e.Event == audit.EventAllowed {
			rules[e.Rule+" "+strings.SplitN(e.Host, ":", 2)[0]]++
		}
	}
	for _, want := range []string{audit.RuleNotListed + " tprefused.test", audit.RuleInternal + " private.test", audit.RuleAllowed + " tp.test"} {
		if rules[want] == 0 {
			t.Errorf("audit: no %q event (have %v)", want, rules)
		}
	}
	if t.Failed() {
		t.Logf("sandbox output:\n%s\n%s", r.Stdout, r.Stderr)
	}
}

func containsName(names []string, n string) bool {
	for _, x := range names {
		if x == n {
			return true
		}
	}
	return false
}

// TestRelayOutOfTheAgentsReach: the agent tries to stop, trace, read,
// replace, impersonate or reconfigure the relay, then uses it. The control
// for every method is the same method against a process of the agent's own
// (it works there); the relay still carries a request at the end, and it
// presents the name the program resolved, whatever Host or SNI is sent.
func TestRelayOutOfTheAgentsReach(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, dnsConfig())
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	noproxy := "env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY "
	relayPid := `$(awk '/^Uid:/ && $2 == 999 {split(FILENAME, f, "/"); print f[3]; exit}' /proc/[0-9]*/status)`
	ptrace := `python3 -c 'import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); r=l.ptrace(16, int(sys.argv[1]), 0, 0); print("ptrace", r, ctypes.get_errno()); sys.exit(0 if r == 0 else 1)' `
	readMem := `python3 -c 'import sys; f=open("/proc/%s/mem" % sys.argv[1], "rb"); print("opened")' `
	bind := `python3 -c 'import socket,sys; s=socket.socket(socket.AF_INET, int(sys.argv[3])); s.bind((sys.argv[1], int(sys.argv[2]))); print("bound")' `
	cases := []timedCase{
		// Controls: each method works on a process of the agent's own.
		{"control-own-pid", "sh -c 'sleep 300 >/dev/null 2>&1 & echo $! > /tmp/own'", "ok", ""},
		{"control-ptrace", ptrace + "$(cat /tmp/own)", "ok", "ptrace 0"},
		{"control-mem", readMem + "$(cat /tmp/own)", "ok", "opened"},
		{"control-kill", "kill -KILL $(cat /tmp/own)", "ok", ""},
		{"control-bind-high", bind + "127.0.0.1 1999 1", "ok", "bound"},
		// The relay: uid 999, its own session, not dumpable.
		{"relay-found", `test -n "` + relayPid + `" && grep -E '^(Uid|NoNewPrivs|Seccomp|CapEff):' /proc/` + relayPid + `/status | tr '\t' ' '`, "ok", "NoNewPrivs: 1"},
		{"kill", "kill -KILL " + relayPid, "refused", ""},
		{"stop", "kill -STOP " + relayPid, "refused", ""},
		{"ptrace", ptrace + relayPid, "refused", ""},
		{"mem", readMem + relayPid, "refused", ""},
		{"bind-relay-port", bind + "127.0.0.1 999 1", "refused", ""},
		{"bind-resolver", bind + "127.0.0.53 53 2", "refused", ""},
		{"replace-binary", "cp /bin/true /usr/local/bin/aisb-entrypoint", "refused", ""},
		{"resolv-conf", "echo nameserver " + testhost.UpstreamAddr + " > /etc/resolv.conf", "refused", ""},
		{"nft-flush", "probe nft flush", "refused", ""},
		// Another name than the one resolved: the Host header is rewritten,
		// an SNI for another name is refused by the gate.
		{"host-header", noproxy + "curl -sS --max-time 20 --noproxy '*' -H 'Host: tprefused.test' http://tp.test/tp-host-" + nonce, "ok", "host=tp.test"},
		{"sni-other", noproxy + "curl -sSk --max-time 20 --noproxy '*' --connect-to tprefused.test:443:tp.test:443 https://tprefused.test/", "refused", ""},
		// And it still works.
		{"still-works", noproxy + "curl -sSk --max-time 20 --noproxy '*' https://tp.test/tp-after-" + nonce, "ok", "host=tp.test"},
	}
	writeUserFile(t, a.project+"/reach.sh", renderTimed(cases))
	mark := testhost.DNSMark(t)
	r := a.run(t, "run", "--allow", "tp.test", "--harness", "shell", "--", "sh", "/project/reach.sh")
	if r.Code != 0 {
		t.Fatalf("session: %s", r)
	}
	checkTimed(t, cases, parseResults(t, r.Stdout))
	if !upstreamSaw(t, "/tp-after-"+nonce) || !upstreamSaw(t, "/tp-host-"+nonce) {
		t.Errorf("the upstream never saw the requests after the attempts")
	}
	for _, q := range testhost.DNSQueries(t, mark) {
		if strings.Contains(q, "tprefused.test") {
			t.Errorf("the upstream's resolver was asked for %q", q)
		}
	}
	sni := false
	for _, e := range a.events(t) {
		if e.Blocked() && strings.HasPrefix(e.Host, "tp.test") {
			sni = true
		}
	}
	if !sni {
		t.Errorf("the gate did not refuse (and audit) the tunnel to tp.test with another SNI")
	}
	if t.Failed() {
		t.Logf("sandbox output:\n%s\n%s", r.Stdout, r.Stderr)
	}
}
