// The real gate's tests in one file of about 370 lines: they share one
// image, one connection and the helpers that talk to a running squid.

package gate_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/netaddr"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// connect drives the test user's rootless Podman through the bindings and
// makes sure the gate image exists.
func connect(t *testing.T) (*engine.Conn, string) {
	t.Helper()
	c, err := engine.Connect(context.Background(), engine.Where{URI: testhost.Service(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var progress bytes.Buffer
	tag, _, err := image.Ensure(c, gate.ImageSpec(testhost.BaseImage), image.Build{LockDir: t.TempDir(), Output: image.Output{W: &progress}})
	if err != nil {
		t.Fatalf("gate image: %v\n%s", err, progress.String())
	}
	return c, tag
}

func hosts(t *testing.T, entries ...string) []allowlist.Host {
	t.Helper()
	hs, errs := allowlist.Parse(entries)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return hs
}

// TestSquidParse: every generated config passes squid -k parse in the gate
// image with no ERROR, FATAL, WARNING, NOTICE, UPGRADE or UNRECOGNIZED line
// but the single expected Via warning.
func TestSquidParse(t *testing.T) {
	c, img := connect(t)
	_ = c
	dns := []netip.Addr{netip.MustParseAddr(testhost.UpstreamAddr)}
	host, err := netaddr.HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]squidconf.Config{
		"empty":     {},
		"names":     {Allowlist: hosts(t, "allowed.test", ".domain.test", "api.github.com")},
		"addresses": {Allowlist: hosts(t, "198.51.100.10", "192.0.2.7")},
		"both+dns":  {Allowlist: hosts(t, ".allowed.test", "198.51.100.10"), DNS: dns},
		"ssh":       {Allowlist: hosts(t, "allowed.test", "198.51.100.10"), SSHHosts: hosts(t, "git.test", ".forge.test")},
		"ssh only":  {SSHHosts: hosts(t, "git.test")},
		"credentials": {Allowlist: hosts(t, "api.allowed.test", ".domain.test"), Credentials: []squidconf.Credential{
			{Name: "TEST_KEY", Host: hosts(t, "api.allowed.test")[0], Header: "x-api-key", Value: "k-1%2"},
			{Name: "TEST_BEARER", Host: hosts(t, "api.allowed.test")[0], Header: "authorization", Value: "Bearer b-1"},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.Session, cfg.Port, cfg.TLSPort, cfg.Dir, cfg.Host = "parse-test", 3128, 3129, "/gate", host
			if cfg.Tokens, err = squidconf.NewTokens(); err != nil {
				t.Fatal(err)
			}
			conf, err := squidconf.Render(cfg)
			if err != nil {
				t.Fatal(err)
			}
			dir := testhost.UserDir(t)
			if _, _, err := gate.WriteTLSFiles(dir, cfg.Credentials, nil); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "squid.conf"), []byte(conf), 0o644)
			r := testhost.Podman(t, "run", "--rm", "--network=none", "--userns=keep-id:uid=13,gid=13", "--user", "proxy", "-v", dir+":/gate:ro", img, "squid", "-k", "parse", "-f", "/gate/squid.conf")
			if r.Code != 0 {
				t.Fatalf("squid -k parse: %s", r)
			}
			via := 0
			for _, l := range strings.Split(r.Stdout+r.Stderr, "\n") {
				switch {
				case strings.Contains(l, "WARNING: HTTP requires the use of Via"):
					via++
				case strings.Contains(l, "ERROR"), strings.Contains(l, "FATAL"), strings.Contains(l, "WARNING"),
					strings.Contains(l, "NOTICE"), strings.Contains(l, "UPGRADE"), strings.Contains(l, "UNRECOGNIZED"):
					t.Errorf("squid -k parse: %s", l)
				}
			}
			if via != 1 {
				t.Errorf("want exactly one Via warning, got %d:\n%s", via, r.Stderr)
			}
		})
	}
}

// raw sends one request line (and headers) to the gate and returns the
// status, the open connection and the reader positioned after the headers.
// asSandbox holds, for each test gate's address, the Proxy-Authorization
// its sandbox would send (registered by sandboxOf); raw sends it with
// every request that brings none of its own.
var asSandbox sync.Map

// sandboxOf registers g's token for raw: the tests speak to g as its
// sandbox does. TestGateRefusesOutsiders speaks without it.
func sandboxOf(t *testing.T, g *gate.Gate) {
	t.Helper()
	asSandbox.Store(g.Addr(), g.ProxyAuthorization())
	t.Cleanup(func() { asSandbox.Delete(g.Addr()) })
}

func raw(t *testing.T, gateAddr, req string) (int, net.Conn, *bufio.Reader) {
	t.Helper()
	code, conn, br, err := rawErr(t, gateAddr, req)
	if err != nil {
		t.Fatal(err)
	}
	return code, conn, br
}

// rawErr is raw that returns its error, for a caller that expects the
// gate's port to be closed for a moment (squid reopens its ports on a
// reconfigure).
func rawErr(t *testing.T, gateAddr, req string) (int, net.Conn, *bufio.Reader, error) {
	t.Helper()
	if auth, ok := asSandbox.Load(gateAddr); ok && !strings.Contains(req, "Proxy-Authorization:") {
		line, rest, _ := strings.Cut(req, "\r\n")
		req = line + "\r\nProxy-Authorization: " + auth.(string) + "\r\n" + rest
	}
	conn, err := net.DialTimeout("tcp", gateAddr, 5*time.Second)
	if err != nil {
		return 0, nil, nil, err
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, nil, nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read reply to %q: %w", strings.SplitN(req, "\r\n", 2)[0], err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(req, "CONNECT") {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	return resp.StatusCode, conn, br, nil
}

func get(t *testing.T, gateAddr, url, host string) int {
	t.Helper()
	code, conn, _ := raw(t, gateAddr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", url, host))
	conn.Close()
	return code
}

func connectTo(t *testing.T, gateAddr, target string) int {
	t.Helper()
	code, conn, _ := raw(t, gateAddr, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target))
	conn.Close()
	return code
}

// direct fetches http://addr/ without the gate: the control for a refusal.
func direct(t *testing.T, addr string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + net.JoinHostPort(addr, "80") + "/")
	if err != nil {
		t.Fatalf("control: %s:80 is not reachable without the gate: %v", addr, err)
	}
	resp.Body.Close()
}

type request struct {
	name   string
	do     func(t *testing.T, gateAddr string) int
	status int
	rule   string
}

func startGate(t *testing.T, c engine.Engine, img string, session string, hosts []allowlist.Host) *gate.Gate {
	t.Helper()
	g, err := gate.Start(c, gate.Options{
		Session: session, Dir: testhost.UserDir(t), Image: img, Allowlist: hosts,
		DNS: []netip.Addr{netip.MustParseAddr(testhost.UpstreamAddr)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Stop(c) })
	sandboxOf(t, g)
	return g
}

// TestGate runs a real gate and asks it for everything the design admits and
// refuses; every refusal of a reachable target is paired with its control,
// and every decision must appear in the access log with its rule. Over 100
// lines: one gate, and one DNS mark, serve the whole table of requests and
// the check that no refused name was resolved.
func TestGate(t *testing.T) {
	c, img := connect(t)
	testhost.ServeHTTP80(t, "127.0.0.1")
	testhost.ServeHTTP80(t, testhost.HostSelf)
	for _, a := range append(slices.Collect(mapsValues(testhost.Internal)), testhost.UpstreamAddr, "127.0.0.1", testhost.HostSelf) {
		direct(t, a)
	}
	internalNames := []string{"loopback.test", "private.test", "private172.test", "private192.test", "metadata.test", "cgnat.test", "hostself.test", "mixed.test"}
	list := hosts(t, append([]string{"allowed.test"}, internalNames...)...)
	mark := testhost.DNSMark(t)
	g := startGate(t, c, img, "gate-test", list)

	gets := func(url string) func(*testing.T, string) int {
		return func(t *testing.T, a string) int {
			return get(t, a, url, strings.Split(strings.TrimPrefix(url, "http://"), "/")[0])
		}
	}
	connects := func(target string) func(*testing.T, string) int {
		return func(t *testing.T, a string) int { return connectTo(t, a, target) }
	}
	reqs := []request{
		{"listed name over HTTP", gets("http://allowed.test/"), 200, audit.RuleAllowed},
		// Admitted at CONNECT, then closed before any TLS: nothing passed,
		// and the audit must not call it allowed.
		{"listed name over CONNECT, closed at once", connects("allowed.test:443"), 200, audit.RuleTerminated},
		{"unlisted name over HTTP", gets("http://other.test/"), 403, audit.RuleNotListed},
		{"unlisted name over CONNECT", connects("unlisted.test:443"), 403, audit.RuleNotListed},
		{"CONNECT to 22", connects("allowed.test:22"), 403, audit.RuleSSHNotListed},
		{"CONNECT to 8443", connects("allowed.test:8443"), 403, audit.RuleConnectPort},
		{"plain HTTP to 8080", gets("http://allowed.test:8080/"), 403, audit.RulePort},
		{"ftp scheme", func(t *testing.T, a string) int { return get(t, a, "ftp://allowed.test/", "allowed.test") }, 403, audit.RuleScheme},
		{"cache manager", gets(fmt.Sprintf("http://127.0.0.1:%d/squid-internal-mgr/menu", g.Port)), 403, audit.RuleManager},
		{"cache manager by name", gets("http://allowed.test/squid-internal-mgr/menu"), 403, audit.RuleManager},
	}
	for _, lit := range []string{testhost.UpstreamAddr, "127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0", "[::1]", "[::ffff:7f00:1]", "[::ffff:198.51.100.10]", "[::]", "10.255.77.10"} {
		reqs = append(reqs, request{"IP literal " + lit + " over HTTP", gets("http://" + lit + "/"), 403, audit.RuleIPLiteral})
	}
	for _, lit := range []string{testhost.UpstreamAddr + ":443", "[::1]:443", "2130706433:443"} {
		reqs = append(reqs, request{"IP literal " + lit + " over CONNECT", connects(lit), 403, audit.RuleIPLiteral})
	}
	for _, n := range internalNames {
		reqs = append(reqs, request{"listed " + n + " (internal address) over HTTP", gets("http://" + n + "/"), 403, audit.RuleInternal})
		reqs = append(reqs, request{"listed " + n + " (internal address) over CONNECT", connects(n + ":443"), 403, audit.RuleInternal})
	}
	for _, r := range reqs {
		t.Run(r.name, func(t *testing.T) {
			if got := r.do(t, g.Addr()); got != r.status {
				t.Errorf("status %d, want %d", got, r.status)
			}
		})
	}

	// HTTPS through an allowed tunnel reaches the upstream end to end.
	code, conn, br := raw(t, g.Addr(), "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
	if code != 200 {
		t.Fatalf("CONNECT allowed.test:443: %d", code)
	}
	tc := tls.Client(&bufConn{conn, br}, &tls.Config{InsecureSkipVerify: true, ServerName: "allowed.test"})
	io.WriteString(tc, "GET /over-tls HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
	body, _ := io.ReadAll(tc)
	if !strings.Contains(string(body), "aisb-upstream https host=allowed.test path=/over-tls") {
		t.Errorf("HTTPS through the tunnel: %q", body)
	}
	conn.Close()

	// A refused name is never resolved: the gate's resolver is not a channel.
	queries := testhost.DNSQueries(t, mark)
	for _, refused := range []string{"other.test", "unlisted.test"} {
		if slices.Contains(queries, refused) {
			t.Errorf("the gate resolved the refused name %s", refused)
		}
	}
	// Control: allowed names were resolved through the configured resolver.
	if !slices.Contains(queries, "allowed.test") || !slices.Contains(queries, "private.test") {
		t.Errorf("allowed names not resolved through network.dns; queries %q", queries)
	}

	// The access log holds one line per request with the rule that decided.
	// CONNECT lines are written when the tunnel closes.
	if err := g.Stop(c); err != nil {
		t.Fatal(err)
	}
	events := readEvents(t, g)
	want := map[string]int{}
	for _, r := range reqs {
		want[r.rule]++
	}
	want[audit.RuleAllowed]++ // the TLS tunnel
	got := map[string]int{}
	for _, e := range events {
		got[e.Rule]++
		if e.Session != "gate-test" || audit.Allowed(e.Rule) == e.Blocked() {
			t.Errorf("event %+v", e)
		}
	}
	for rule, n := range want {
		if got[rule] != n {
			t.Errorf("access log: %d lines with rule %s, want %d (all: %v)", got[rule], rule, n, got)
		}
	}
	if len(events) != len(reqs)+1 {
		t.Errorf("access log has %d lines for %d requests: %+v", len(events), len(reqs)+1, events)
	}
}

func mapsValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// TestListedAddress: an IPv4 address listed exactly is admitted as a literal,
// still refused when it is internal, and other literals stay refused.
func TestListedAddress(t *testing.T) {
	c, img := connect(t)
	direct(t, testhost.UpstreamAddr)
	direct(t, testhost.Internal["private"])
	g := startGate(t, c, img, "gate-addr", hosts(t, testhost.UpstreamAddr, testhost.Internal["private"]))
	for _, r := range []struct {
		url    string
		status int
	}{
		{"http://" + testhost.UpstreamAddr + "/", 200},
		{"http://" + testhost.Internal["private"] + "/", 403},
		{"http://198.51.100.11/", 403},
		{"http://allowed.test/", 403},
	} {
		if got := get(t, g.Addr(), r.url, "x"); got != r.status {
			t.Errorf("%s: %d, want %d", r.url, got, r.status)
		}
	}
}

// TestListedNetwork: a listed IPv4 network admits literals inside it only.
func TestListedNetwork(t *testing.T) {
	c, img := connect(t)
	direct(t, testhost.UpstreamAddr)
	g := startGate(t, c, img, "gate-net", hosts(t, "198.51.100.8/29"))
	for _, r := range []struct {
		url    string
		status int
	}{
		{"http://" + testhost.UpstreamAddr + "/", 200},
		{"http://198.51.100.20/", 403},
		{"http://allowed.test/", 403},
	} {
		if got := get(t, g.Addr(), r.url, "x"); got != r.status {
			t.Errorf("%s: %d, want %d", r.url, got, r.status)
		}
	}
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func readEvents(t *testing.T, g *gate.Gate) []audit.Event {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := audit.Follow(ctx, filepath.Join(g.Dir, "access.log"), g.Session, &out); err != nil {
		t.Fatal(err)
	}
	var events []audit.Event
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e audit.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		events = append(events, e)
	}
	return events
}
