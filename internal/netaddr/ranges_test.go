package netaddr

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestSpecialPurposeRanges: the IPv6 ranges that carry or reach IPv4 or
// local networks (NAT64, 6to4, Teredo, site-local, IPv4-compatible,
// IPv4-mapped) and discard are refused; public addresses are not.
func TestSpecialPurposeRanges(t *testing.T) {
	var h Host
	for _, s := range []string{
		"64:ff9b::a00:1", "64:ff9b::c633:640a", "64:ff9b:1::1", "2002:a00:1::1", "2002:c633:640a::1",
		"2001:0:a00:1::1", "fec0::1", "::a00:1", "::c633:640a", "::ffff:10.255.77.10", "::ffff:127.0.0.1", "100::1",
	} {
		if !h.Internal(netip.MustParseAddr(s)) {
			t.Errorf("%s is not internal", s)
		}
	}
	// Controls: public IPv4, its mapped form, and ordinary global IPv6.
	for _, s := range []string{"198.51.100.10", "::ffff:198.51.100.10", "2001:db8:77::10", "2a00:1450::1", "2001:1::1"} {
		if h.Internal(netip.MustParseAddr(s)) {
			t.Errorf("%s is internal", s)
		}
	}
}

// TestOnLinkPrefixes: the prefixes the host's addresses sit in are refused
// whole (the LAN's router and NAS), not only the host's own addresses, and
// squid's list holds each exactly once, never inside another entry.
func TestOnLinkPrefixes(t *testing.T) {
	h := Host{
		Addrs:    []netip.Addr{netip.MustParseAddr("192.0.2.5"), netip.MustParseAddr("2001:db8:5::5"), netip.MustParseAddr("192.0.2.6")},
		Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/28"), netip.MustParsePrefix("2001:db8:5::/64"), netip.MustParsePrefix("192.0.2.0/28")},
	}
	for _, s := range []string{"192.0.2.1", "192.0.2.14", "2001:db8:5::1", "2001:db8:5::ffff"} {
		if !h.Internal(netip.MustParseAddr(s)) {
			t.Errorf("%s (on-link) is not internal", s)
		}
	}
	for _, s := range []string{"192.0.2.17", "2001:db8:6::1"} {
		if h.Internal(netip.MustParseAddr(s)) {
			t.Errorf("%s (off-link) is internal", s)
		}
	}
	if got := h.Overlap(netip.MustParsePrefix("192.0.2.0/24")); got == "" {
		t.Errorf("a network holding the host's on-link prefix may be admitted")
	}
	refused := h.Refused()
	for _, want := range []string{"192.0.2.0/28", "2001:db8:5::/64", "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32", "fec0::/10", "::/96", "100::/64"} {
		if n := slices.Index(refused, want); n < 0 || slices.Index(refused[n+1:], want) >= 0 {
			t.Errorf("squid's refused list holds %s %d times: %v", want, strings.Count(" "+strings.Join(refused, " ")+" ", " "+want+" "), refused)
		}
	}
	// squid reads ::ffff:0:0/96 as all of IPv4; it judges mapped answers
	// by the IPv4 ranges instead (the gate test proves it with a request).
	for _, bad := range []string{"::ffff:0:0/96", "192.0.2.5", "192.0.2.6", "2001:db8:5::5", "::/128", "::1/128"} {
		if slices.Contains(refused, bad) {
			t.Errorf("squid's refused list holds %s: %v", bad, refused)
		}
	}
}
