package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// The escape battery: a real `aisb run` sandbox under each network helper,
// asked to get out every way we know, each block paired with a control that
// proves the target reachable from a plain container on the same helper.

// internalNames resolve (at the test upstream's resolver) to addresses of our
// own test host in each internal range; they are allowlisted on purpose.
var internalNames = []string{"loopback.test", "private.test", "private172.test", "private192.test", "metadata.test", "cgnat.test", "hostself.test", "mixed.test"}

type battery struct {
	name    string
	argv    string // in the sandbox
	control string // the same target from a plain container; "" when the control is elsewhere (named in why)
	want    string // "reach", "block", "403", or "local" (answered inside; nothing reached the upstream)
	pasta   bool   // only under pasta (slirp4netns has no IPv6 by default)
}

func TestEscapeBattery(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	testhost.ServeHTTP80(t, "127.0.0.1")
	testhost.ServeHTTP80(t, testhost.HostSelf)
	hostPort := listenLoopback(t, "opened host port")
	otherPort := listenLoopback(t, "other host service")
	up, up6 := testhost.UpstreamAddr, testhost.Upstream6

	for _, h := range helpers {
		t.Run(h.name, func(t *testing.T) {
			a := newAisb(t, base, "version = 1\n[network]\ndns = [\""+up+"\"]\n")
			m := h.mapped
			px := `/usr/local/bin/probe http-proxy "$HTTP_PROXY"`
			cases := []battery{
				// Direct ways out: the table drops them.
				{"tcp-80", "probe tcp " + up + ":80", "probe tcp " + up + ":80", "block", false},
				{"tcp-443", "probe tcp " + up + ":443", "probe tcp " + up + ":443", "block", false},
				{"tcp-22", "probe tcp " + up + ":22", "probe tcp " + up + ":22", "block", false},
				{"udp", "probe udp " + up + ":9999", "probe udp " + up + ":9999", "block", false},
				// DNS to any server is answered by the sandbox's own
				// resolver (the relay), which never asks anyone: the
				// upstream's resolver must not see the name (checked below).
				{"dns-udp", "probe dns " + up + " tprefused.test", "probe dns " + up + " allowed.test", "local", false},
				{"dns-tcp", "probe dns-tcp " + up + " tprefused.test", "probe dns-tcp " + up + " allowed.test", "local", false},
				{"dns-resolv-conf", `probe dns "$(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf)" tprefused.test`, `probe dns "$(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf)" allowed.test`, "local", false},
				{"icmp", "probe ping " + up, "probe ping " + up, "block", false},
				{"ipv6", "probe tcp [" + up6 + "]:80", "probe tcp [" + up6 + "]:80", "block", true},
				{"other-host-port", fmt.Sprintf("probe tcp %s:%d", m, otherPort), fmt.Sprintf("probe tcp %s:%d", m, otherPort), "block", false},
				{"raw-socket", "probe socket raw", "probe socket raw", "block", false},
				{"packet-socket", "probe socket packet", "probe socket packet", "block", false},
				// The agent against its own lock.
				{"nft-flush", "probe nft flush", "", "block", false},
				{"nft-delete", "probe nft delete", "", "block", false},
				{"nft-accept", "probe nft accept", "", "block", false},
				{"userns-nft-flush", "unshare -r probe nft flush", "", "block", false},
				{"userns-works", "unshare -r id -u", "", "reach", false},
				{"netns-no-route", `unshare -rn probe tcp "$gate"`, "", "block", false},
				// What is allowed.
				{"gate-reachable", `probe tcp "$gate"`, "", "reach", false},
				{"opened-host-port", fmt.Sprintf("probe tcp %s:%d", m, hostPort), fmt.Sprintf("probe tcp %s:%d", m, hostPort), "reach", false},
				{"loopback", "probe loopback", "", "reach", false},
				{"listed-http", px + " http://allowed.test/", "probe http http://" + up + "/", "reach", false},
				{"listed-https", px + " https://allowed.test/", "probe http https://" + up + "/", "reach", false},
				{"curl-https", "curl -sSfk --max-time 10 https://allowed.test/", "", "reach", false},
				// The gate's refusals.
				{"unlisted-name", px + " http://refused.test/", "probe http http://" + up + "/", "403", false},
				{"unlisted-connect", px + " https://refused.test/", "probe http https://" + up + "/", "403", false},
				{"connect-22", px + " https://allowed.test:22/", "probe tcp " + up + ":22", "403", false},
				// Without the proxy: the relay carries the name to the gate.
				{"noproxy-unlisted-http", "curl -sSf --max-time 10 --noproxy '*' http://tprefused.test/", "probe http http://" + up + "/", "403", false},
				{"noproxy-unlisted-https", "curl -sSk --max-time 10 --noproxy '*' https://tprefused.test/", "probe http https://" + up + "/", "block", false},
				{"noproxy-quic", `probe udp "$(getent ahostsv4 allowed.test | awk 'NR==1 {print $1}')":443`, "probe udp " + up + ":9999", "block", false},
				{"http-8080", px + " http://allowed.test:8080/", "probe http http://" + up + ":8080/", "403", false},
			}
			for _, lit := range []string{up, "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "[::1]", "[::ffff:7f00:1]", "[::ffff:c633:640a]"} {
				cases = append(cases, battery{"literal-http-" + lit, px + " http://" + lit + "/", "probe http http://" + up + "/", "403", false})
			}
			cases = append(cases, battery{"literal-connect", px + " https://" + up + "/", "probe http https://" + up + "/", "403", false})
			targets := map[string]string{"loopback.test": fmt.Sprintf("%s:80", m), "hostself.test": testhost.HostSelf + ":80", "mixed.test": testhost.Internal["private"] + ":80",
				"private.test": testhost.Internal["private"] + ":80", "private172.test": testhost.Internal["private172"] + ":80", "private192.test": testhost.Internal["private192"] + ":80",
				"metadata.test": testhost.Internal["metadata"] + ":80", "cgnat.test": testhost.Internal["cgnat"] + ":80"}
			for _, n := range internalNames {
				cases = append(cases, battery{"internal-" + n, px + " http://" + n + "/", "probe tcp " + targets[n], "403", false})
			}

			// Controls: every target reachable from a plain container on this helper.
			var controls, inside []scriptCase
			for _, c := range cases {
				if c.pasta && h.name != "pasta" {
					continue
				}
				if c.control != "" {
					controls = append(controls, scriptCase{c.name, c.control})
				}
				inside = append(inside, scriptCase{c.name, c.argv})
			}
			ctlScript := filepath.Join(testhost.AgentDir(t), "controls.sh")
			if err := os.WriteFile(ctlScript, []byte(renderScript(controls)), 0o755); err != nil {
				t.Fatal(err)
			}
			r := testhost.Podman(t, "run", "--rm", "--network="+h.network, "--dns="+up, "--cap-add=NET_RAW", "-v", ctlScript+":/controls.sh:ro", base, "sh", "/controls.sh")
			ctl := parseResults(t, r.Stdout)
			for _, c := range controls {
				if got, ok := ctl[c.name]; !ok || got.code != 0 {
					t.Errorf("control %s: target not reachable without the sandbox (%s): %+v\n%s", c.name, c.argv, got, r.Stderr)
				}
			}
			// Control for the setuid case: without no_new_privs the binary gives root.
			if r := testhost.Podman(t, "run", "--rm", "--network=none", "--user=1000:1000", base, "/usr/local/bin/probe-suid", "status"); !strings.Contains(r.Stdout, "euid: 0") {
				t.Errorf("control: probe-suid does not give root outside the sandbox: %s", r)
			}
			if t.Failed() {
				t.FailNow()
			}

			mark := testhost.DNSMark(t)
			writeUserFile(t, filepath.Join(a.project, "battery.sh"), renderScript(inside)+
				"echo written-by-agent > /project/agent-file\n/usr/local/bin/probe-suid status\n/usr/local/bin/probe status\nexit 42\n")
			args := []string{"run", "--network-helper", h.name, "--harness", "shell", "--allow", "allowed.test", "--host-port", fmt.Sprint(hostPort)}
			for _, n := range internalNames {
				args = append(args, "--allow", n)
			}
			start := time.Now()
			r = a.run(t, append(args, "--", "sh", "/project/battery.sh")...)
			t.Logf("battery under %s took %s", h.name, time.Since(start).Round(time.Millisecond))
			if r.Code != 42 {
				t.Errorf("exit status %d, want the command's 42: %s", r.Code, r.Stderr)
			}
			got := parseResults(t, r.Stdout)
			// One sandbox run carries every case (a run per case would cost a
			// session each); each case is judged, and reported, on its own.
			for _, c := range cases {
				if c.pasta && h.name != "pasta" {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					res, ok := got[c.name]
					switch {
					case !ok:
						t.Errorf("no result")
					case c.want == "reach" && res.code != 0:
						t.Errorf("blocked, want reachable: %s", res.out)
					case c.want == "block" && res.code == 0:
						t.Errorf("ESCAPED: %s", res.out)
					case c.want == "local" && (res.code != 0 || !strings.Contains(res.out, "answered")):
						t.Errorf("not answered by the sandbox's resolver: %s", res.out)
					case c.want == "403" && (res.code == 0 || !(strings.Contains(res.out, "403") || strings.Contains(res.out, "Forbidden"))):
						t.Errorf("want the gate's 403, got %d %s", res.code, res.out)
					}
				})
			}
			if res := got["nft-flush"]; !strings.Contains(res.out, "operation not permitted") {
				t.Errorf("nft flush: %s", res.out)
			}
			// Its own capabilities, and the setuid binary's.
			for _, want := range []string{"CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000",
				"CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1", "Uid: 1000 1000 1000 1000"} {
				if !strings.Contains(r.Stdout, want) {
					t.Errorf("the agent's status lacks %q", want)
				}
			}
			if strings.Contains(r.Stdout, "euid: 0") {
				t.Errorf("the setuid binary gave root back:\n%s", r.Stdout)
			}
			// The file the agent wrote is the user's.
			fi, err := os.Stat(filepath.Join(a.project, "agent-file"))
			if err != nil {
				t.Errorf("file written in /project: %v", err)
			} else if owner := fileOwner(fi); owner != testhost.User {
				t.Errorf("file written in /project is owned by %s, want %s", owner, testhost.User)
			}
			// A refused name is never resolved.
			for _, q := range testhost.DNSQueries(t, mark) {
				if q == "refused.test" {
					t.Errorf("the gate resolved the refused name refused.test")
				}
				if q == "tprefused.test" {
					t.Errorf("a query for tprefused.test, asked only inside the sandbox, reached the upstream's resolver (ESCAPED)")
				}
			}
			// The audit log has one line per gate request, with its rule.
			rules := map[string]int{}
			for _, e := range a.events(t) {
				rules[e.Rule]++
			}
			wantRules := map[string]int{audit.RuleAllowed: 3, audit.RuleNotListed: 4, audit.RuleSSHNotListed: 1, audit.RulePort: 1, audit.RuleIPLiteral: 9, audit.RuleInternal: len(internalNames)}
			for rule, n := range wantRules {
				if rules[rule] != n {
					t.Errorf("audit: %d events with rule %s, want %d (all %v)", rules[rule], rule, n, rules)
				}
			}
			if t.Failed() {
				t.Logf("sandbox output:\n%s\n%s", r.Stdout, r.Stderr)
			}
			assertNothingLeft(t, a)
		})
	}
}

// assertNothingLeft: no container of a's sessions outlives its session: the
// sandbox is gone when aisb returns, the gate moments later (the session's
// watchdog finishes it off the user's path; gatepath_test.go). Only a's own
// sessions, by their label: other tests' sessions may be running.
func assertNothingLeft(t *testing.T, a *aisbUser) {
	t.Helper()
	if len(a.sessionIDs(t)) == 0 {
		t.Fatalf("control: no session directory under %s", a.state)
	}
	// The session's watchdog removes them once squid is quiet and no
	// other session starts (at most 0.5 s more). Under make test's load
	// Podman's removals, waiting on the storage that other tests' image
	// builds hold, have taken more than 5 s, and once more than 15: the
	// bound is what "never removed" needs, not a speed.
	var names []string
	waitFor(60*time.Second, func() bool {
		names = a.containers(t)
		return len(names) == 0
	})
	if len(names) > 0 {
		t.Errorf("containers left behind 60 s after the session: %v", names)
	}
}
