package gate_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestSpecialRangesRefused: allowed names whose addresses lie in NAT64,
// 6to4, Teredo, site-local, IPv4-compatible, IPv4-mapped internal or
// discard space are refused by a real gate. Controls: an allowed public
// name, its IPv4-mapped AAAA (squid reads a mapped answer as the IPv4
// address it is, so the mapped range is not "all of IPv4"), and plain IPv6.
func TestSpecialRangesRefused(t *testing.T) {
	c, img := connect(t)
	lan := newLAN(t)
	direct(t, lanHost)
	refused := []string{"nat64.test", "nat64local.test", "sixtofour.test", "teredo.test", "sitelocal.test", "v4compat.test", "mappedprivate.test", "discard.test"}
	admitted := []string{"lanpublic.test", "mappedpublic.test", "lan6.test"}
	g := lan.gate(t, c, img, "gate-ranges", append(slices.Clone(admitted), refused...)...)
	for _, n := range admitted {
		if got := get(t, g.Addr(), "http://"+n+"/", n); got != 200 {
			t.Errorf("control: %s through the gate: %d, want 200", n, got)
		}
	}
	for _, n := range refused {
		if got := get(t, g.Addr(), "http://"+n+"/", n); got != 403 {
			t.Errorf("%s through the gate: %d, want 403", n, got)
		}
		if got := connectTo(t, g.Addr(), n+":443"); got != 403 {
			t.Errorf("CONNECT %s:443 through the gate: %d, want 403", n, got)
		}
	}
	g.Stop(c)
	rules := map[string]string{}
	for _, e := range readEvents(t, g) {
		rules[e.Host] = e.Rule
	}
	for _, n := range refused {
		if rules[n] != audit.RuleInternal {
			t.Errorf("%s: rule %q, want %s (all: %v)", n, rules[n], audit.RuleInternal, rules)
		}
	}
}

// TestGateFollowsOnLinkPrefixes: a name on a host reached by a route is
// admitted; once the host's own address makes that host's network on-link
// (a LAN appearing, a prefix changing), a watching gate refuses it within
// seconds, without restarting.
func TestGateFollowsOnLinkPrefixes(t *testing.T) {
	testhost.RequireRoot(t)
	c, img := connect(t)
	lan := newLAN(t)
	direct(t, lanHost)
	g := lan.gate(t, c, img, "gate-onlink", "onlink.test", "lanpublic.test")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs strings.Builder
	done := make(chan struct{})
	go func() {
		gate.WatchHost(ctx, g, 200*time.Millisecond, func() error { return gate.Reconfigure(c, g) }, func(f string, a ...any) { fmt.Fprintf(&logs, f+"\n", a...) })
		close(done)
	}()
	defer func() { cancel(); <-done }()

	if got := get(t, g.Addr(), "http://onlink.test/", "onlink.test"); got != 200 {
		t.Fatalf("control: onlink.test while routed: %d, want 200", got)
	}
	// The host's end becomes 198.51.100.65/26: 198.51.100.66 is now on-link.
	mustIP(t, "addr", "add", lanSelf+"/26", "dev", lan.hostIf)
	mustIP(t, "addr", "del", lanSelf+"/32", "dev", lan.hostIf)
	// The watcher's reconfigure makes squid close and reopen its ports: a
	// refused connection meanwhile is that moment, not the gate's answer
	// (seen under a load of 13 on 2 cores).
	var got int
	var err error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		var conn net.Conn
		got, conn, _, err = rawErr(t, g.Addr(), "GET http://onlink.test/ HTTP/1.1\r\nHost: onlink.test\r\nConnection: close\r\n\r\n")
		if err == nil {
			conn.Close()
		}
		if got == 403 {
			break
		}
	}
	if got != 403 {
		t.Fatalf("onlink.test after its network became on-link: %d (%v), want 403; watcher said: %s", got, err, logs.String())
	}
	direct(t, lanHost) // still reachable: the gate refused, not the route
	if got := get(t, g.Addr(), "http://mappedpublic.test/", "mappedpublic.test"); got != 403 {
		t.Errorf("the mapped form of the on-link address after the reconfigure: %d, want 403", got)
	}
}
