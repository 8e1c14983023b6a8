// Package netaddr decides which destinations are internal: the refused ranges and this host's own addresses and on-link prefixes.
package netaddr

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// InternalRanges are refused as destinations even for allowed names and
// listed addresses, by the gate and by no-gate pinning alike: the one table.
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
	netip.MustParsePrefix("::/96"),          // IPv4-compatible, and :: and ::1
	netip.MustParsePrefix("::ffff:0:0/96"),  // IPv4-mapped: judged by the IPv4 ranges (see Refused)
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64: reaches any IPv4 address, internal ones too
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("100::/64"),       // discard
	netip.MustParsePrefix("2001::/32"),      // Teredo: tunnels to IPv4
	netip.MustParsePrefix("2002::/16"),      // 6to4: tunnels to IPv4
	netip.MustParsePrefix("fc00::/7"),       // unique local
	netip.MustParsePrefix("fe80::/10"),      // link-local
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated, still routed on some LANs)
	netip.MustParsePrefix("ff00::/8"),       // multicast
}

// mapped is IPv4-mapped IPv6. squid stores every IPv4 address in this form,
// so in a dst ACL it means all of IPv4 (measured): it is never written into
// squid.conf. It needs no entry there: squid judges a mapped answer as the
// IPv4 address it is, against the IPv4 ranges; Internal unmaps first.
var mapped = netip.MustParsePrefix("::ffff:0:0/96")

// Host is this host's own addresses and the prefixes they sit in, at one
// moment: the LAN's router and NAS are in those prefixes, not among the
// host's addresses.
type Host struct {
	Addrs    []netip.Addr
	Prefixes []netip.Prefix // masked, deduplicated
}

// HostAddrs reads the addresses configured on this host's interfaces and
// their on-link prefixes; the gate shares the host's network, so names
// resolving into them are refused.
func HostAddrs() (Host, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return Host{}, fmt.Errorf("list host addresses: %w", err)
	}
	cidrs := make([]string, 0, len(addrs))
	for _, a := range addrs {
		cidrs = append(cidrs, a.String())
	}
	return HostFrom(cidrs), nil
}

// HostFrom is HostAddrs of the interface addresses cidrs ("ADDR/BITS", as
// net.InterfaceAddrs prints them), read on another host (an engine that is
// not local, where the gate's probe reads them); what does not parse is
// skipped.
func HostFrom(cidrs []string) Host {
	var h Host
	for _, a := range cidrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			continue
		}
		addr := p.Addr().WithZone("").Unmap()
		if !slices.Contains(h.Addrs, addr) {
			h.Addrs = append(h.Addrs, addr)
		}
		bits := p.Bits()
		if addr.Is4() && p.Addr().Is4In6() {
			bits -= 96
		}
		if n, err := addr.Prefix(bits); err == nil && n.Bits() > 0 && !slices.Contains(h.Prefixes, n) {
			h.Prefixes = append(h.Prefixes, n)
		}
	}
	return h
}

// Equal reports whether two reads of the host found the same addresses and
// prefixes, in any order.
func (h Host) Equal(o Host) bool {
	return sameSet(h.Addrs, o.Addrs) && sameSet(h.Prefixes, o.Prefixes)
}

func sameSet[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// Internal reports whether a is never to be reached: inside an internal
// range, one of this host's own addresses, or inside one of its on-link
// prefixes. The one function that decides.
func (h Host) Internal(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	return InRanges(a) || slices.Contains(h.Addrs, a) ||
		slices.ContainsFunc(h.Prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
}

// InRanges reports whether a lies inside one of InternalRanges.
func InRanges(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	return slices.ContainsFunc(InternalRanges, func(p netip.Prefix) bool { return p.Contains(a) })
}

// Overlap says why network n may never be admitted: the internal range it
// overlaps, this host's address it holds, or the on-link prefix it touches;
// "" when it may.
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
	for _, p := range h.Prefixes {
		if p.Overlaps(n) {
			return fmt.Sprintf("overlaps this host's on-link network %s", p)
		}
	}
	return ""
}

// Refused lists what squid's internal-destination ACL must hold: every
// range but the mapped one, then the host's on-link prefixes and its own
// addresses that nothing before already covers (squid warns about, and
// ignores, an entry inside another).
func (h Host) Refused() []string {
	var out []string
	var have []netip.Prefix
	covered := func(p netip.Prefix) bool {
		return slices.ContainsFunc(have, func(q netip.Prefix) bool { return q.Bits() <= p.Bits() && q.Contains(p.Addr()) })
	}
	for _, p := range InternalRanges {
		if p == mapped {
			continue
		}
		out, have = append(out, p.String()), append(have, p)
	}
	// Widest first, so that a prefix inside another is dropped.
	prefixes := slices.Clone(h.Prefixes)
	slices.SortStableFunc(prefixes, func(a, b netip.Prefix) int { return a.Bits() - b.Bits() })
	for _, p := range prefixes {
		if p.Addr().Is4In6() || !p.IsValid() || covered(p) {
			continue
		}
		out, have = append(out, p.String()), append(have, p)
	}
	for _, a := range h.Addrs {
		p := netip.PrefixFrom(a, a.BitLen())
		if !a.IsValid() || covered(p) {
			continue
		}
		out, have = append(out, a.String()), append(have, p)
	}
	return out
}
