package gate_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestGateSSH: CONNECT to port 22 reaches the test SSH server for a listed
// name only; an unlisted name (the same server) is refused without being
// resolved, a listed name resolving to an internal address is refused, and
// the SSH list opens nothing on 443.
func TestGateSSH(t *testing.T) {
	c, img := connect(t)
	// Controls: both targets answer on 22 without the gate.
	testhost.SSHBanner(t, testhost.SSHAddr)
	testhost.SSHBanner(t, testhost.Internal["private"])

	ssh := hosts(t, "git.test", "private.test")
	mark := testhost.DNSMark(t)
	g, err := gate.Start(c, gate.Options{
		Session: "gate-ssh", Dir: testhost.UserDir(t), Image: img,
		Allowlist: hosts(t, "allowed.test"), SSHHosts: ssh,
		DNS: dnsUpstream(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Stop(c) })
	sandboxOf(t, g)

	// The listed name: the tunnel carries OpenSSH's own banner.
	code, conn, br := raw(t, g.Addr(), "CONNECT git.test:22 HTTP/1.1\r\nHost: git.test:22\r\n\r\n")
	if code != 200 {
		t.Fatalf("CONNECT git.test:22: %d", code)
	}
	banner, _ := br.ReadString('\n')
	if !strings.HasPrefix(banner, "SSH-2.0-OpenSSH") {
		t.Errorf("through the tunnel: %q, want OpenSSH's banner", banner)
	}
	conn.Close()

	for _, r := range []struct {
		target, rule string
	}{
		{"gitother.test:22", audit.RuleSSHNotListed}, // same server, name not listed
		{"allowed.test:22", audit.RuleSSHNotListed},  // on the HTTPS allowlist only
		{testhost.SSHAddr + ":22", audit.RuleIPLiteral},
		{"private.test:22", audit.RuleInternal},
		{"git.test:443", audit.RuleNotListed},
		{"git.test:2222", audit.RuleConnectPort},
	} {
		if got := connectTo(t, g.Addr(), r.target); got != 403 {
			t.Errorf("CONNECT %s: %d, want 403 (%s)", r.target, got, r.rule)
		}
	}
	queries := testhost.DNSQueries(t, mark)
	if slices.Contains(queries, "gitother.test") {
		t.Errorf("the gate resolved gitother.test, a name refused for SSH")
	}
	if !slices.Contains(queries, "git.test") {
		t.Errorf("control: git.test was not resolved through network.dns; queries %q", queries)
	}

	g.Stop(c)
	got := map[string]int{}
	for _, e := range readEvents(t, g) {
		got[e.Host+" "+e.Rule]++
	}
	for _, want := range []string{"git.test allowed", "gitother.test ssh_not_listed", "allowed.test ssh_not_listed", "private.test internal", "git.test not_listed", "git.test connect_port"} {
		if got[want] != 1 {
			t.Errorf("audit: want one %q, got %v", want, got)
		}
	}
	if a := audit.Advice(audit.Event{Rule: audit.RuleSSHNotListed, Host: "gitother.test"}); !strings.Contains(a, "aisb run --allow-ssh gitother.test") {
		t.Errorf("advice: %q", a)
	}
}

func dnsUpstream() []netip.Addr { return []netip.Addr{netip.MustParseAddr(testhost.UpstreamAddr)} }
