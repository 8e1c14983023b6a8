package session

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/netaddr"
)

// pins are no-gate mode's destinations, fixed at start.
type pins struct {
	hostAdd []string // "name:address" lines for the sandbox's /etc/hosts
	addrs   []netip.Addr
	nets    []netip.Prefix
}

// pin resolves each allowed name once, on the host, for no-gate mode. An
// internal address is never pinned (netaddr decides, as for the gate); a
// name with nothing left is an error.
func pin(ctx context.Context, r *net.Resolver, list []allowlist.Host, logf func(string, ...any)) (pins, error) {
	host, err := netaddr.HostAddrs()
	if err != nil {
		return pins{}, err
	}
	var out pins
	add := func(a netip.Addr) {
		if !slices.Contains(out.addrs, a) {
			out.addrs = append(out.addrs, a)
		}
	}
	for _, h := range list {
		switch {
		case h.IsNet():
			if why := host.Overlap(h.Net); why != "" {
				return pins{}, fmt.Errorf("no-gate: %s %s; it is never admitted", h.Net, why)
			}
			out.nets = append(out.nets, h.Net)
			continue
		case h.IsAddr():
			if host.Internal(h.Addr) {
				return pins{}, fmt.Errorf("no-gate: %s is an internal address; it is never admitted", h.Addr)
			}
			add(h.Addr)
			continue
		case h.Domain:
			logf("no-gate: %s: only the name itself is pinned, not its subdomains", h)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ips, err := r.LookupNetIP(rctx, "ip4", h.Name)
		cancel()
		if err != nil {
			return pins{}, fmt.Errorf("no-gate: resolve %s: %w", h.Name, err)
		}
		kept := 0
		for _, a := range ips {
			a = a.Unmap()
			if host.Internal(a) {
				logf("no-gate: %s resolves to the internal address %s; not pinned", h.Name, a)
				continue
			}
			out.hostAdd = append(out.hostAdd, h.Name+":"+a.String())
			add(a)
			kept++
		}
		if kept == 0 {
			return pins{}, fmt.Errorf("no-gate: %s has no address that may be admitted", h.Name)
		}
	}
	return out, nil
}

// resolver is the host's resolver, or network.dns's first reachable one:
// no-gate mode resolves allowed names where the gate would have.
func resolver(servers []netip.Addr) *net.Resolver {
	if len(servers) == 0 {
		return net.DefaultResolver
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		var err error
		for _, s := range servers {
			var c net.Conn
			if c, err = d.DialContext(ctx, network, netip.AddrPortFrom(s, 53).String()); err == nil {
				return c, nil
			}
		}
		return nil, err
	}}
}

func dnsIPs(servers []netip.Addr) []net.IP {
	var ips []net.IP
	for _, a := range servers {
		ips = append(ips, net.IP(a.AsSlice()))
	}
	return ips
}
