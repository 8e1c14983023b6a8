package netaddr

import (
	"net/netip"
	"strings"
	"testing"
)

func TestInternal(t *testing.T) {
	h := Host{Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("10.1.2.3")}}
	for _, s := range []string{"10.255.77.10", "127.0.0.1", "::1", "::ffff:127.0.0.1", "169.254.169.254", "100.64.0.1", "fe80::1%eth0", "198.51.100.1"} {
		if !h.Internal(netip.MustParseAddr(s)) {
			t.Errorf("%s is not internal", s)
		}
	}
	for _, s := range []string{"198.51.100.10", "192.0.2.1", "2001:db8::1"} {
		if h.Internal(netip.MustParseAddr(s)) {
			t.Errorf("%s is internal", s)
		}
	}
	if got := h.Overlap(netip.MustParsePrefix("198.51.100.0/24")); !strings.Contains(got, "198.51.100.1") {
		t.Errorf("Overlap with the host's address = %q", got)
	}
	if got := h.Overlap(netip.MustParsePrefix("10.0.0.0/8")); !strings.Contains(got, "10.0.0.0/8") {
		t.Errorf("Overlap with a range = %q", got)
	}
	if got := h.Overlap(netip.MustParsePrefix("192.0.2.0/24")); got != "" {
		t.Errorf("a public network overlaps: %q", got)
	}
	refused := strings.Join(h.Refused(), " ")
	if !strings.HasSuffix(refused, "ff00::/8 198.51.100.1") {
		t.Errorf("Refused = %s: want the ranges, then only the host address no range covers", refused)
	}
}
