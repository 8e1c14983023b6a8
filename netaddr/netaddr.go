// Package netaddr decides which destinations are internal: the refused ranges and this host's own addresses.
package netaddr

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// InternalRanges are refused as destinations even for allowed names and
// listed addresses, by the gate and by no-gate pinning alike.
// ::ffff:0:0/96 is deliberately absent: squid reads it as all of IPv4;
// mapped addresses are covered by the IPv4 ranges (Internal unmaps first).
var InternalRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// Host is this host's own addresses at one moment.
type Host struct {
	Addrs []netip.Addr
}

// HostAddrs lists the addresses configured on this host's interfaces; the
// gate shares the host's network, so names resolving to them are refused.
func HostAddrs() (Host, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return Host{}, fmt.Errorf("list host addresses: %w", err)
	}
	var h Host
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			h.Addrs = append(h.Addrs, p.Addr().WithZone("").Unmap())
		}
	}
	return h, nil
}

// Internal reports whether a is never to be reached: inside an internal
// range, or one of this host's own addresses. The one function that decides.
func (h Host) Internal(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	return InRanges(a) || slices.Contains(h.Addrs, a)
}

// InRanges reports whether a lies inside one of InternalRanges.
func InRanges(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	return slices.ContainsFunc(InternalRanges, func(p netip.Prefix) bool { return p.Contains(a) })
}

// Overlap says why network n may never be admitted: the internal range it
// overlaps, or this host's address it holds; "" when it may.
func (h Host) Overlap(n netip.Prefix) string {
	for _, p := range InternalRanges {
		if p.Overlaps(n) {
			return fmt.Sprintf("overlaps the internal range %s", p)
		}
	}
	for _, a := range h.Addrs {
		if n.Contains(a) {
			return fmt.Sprintf("holds this host's own address %s", a)
		}
	}
	return ""
}

// Refused lists what squid's internal-destination ACL must hold: every
// range, then the host's own addresses that no range already covers (squid
// warns about, and ignores, an entry inside another).
func (h Host) Refused() []string {
	var out []string
	for _, p := range InternalRanges {
		out = append(out, p.String())
	}
	seen := map[netip.Addr]bool{}
	for _, a := range h.Addrs {
		if !a.IsValid() || seen[a] || InRanges(a) {
			continue
		}
		seen[a] = true
		out = append(out, a.String())
	}
	return out
}
