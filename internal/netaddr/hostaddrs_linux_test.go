package netaddr

import (
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/internal/netnstest"
)

// TestHostAddrsReadsPrefixes reads a namespace of the test's own: the
// prefixes come from its addresses, and a change is seen on the next read.
func TestHostAddrsReadsPrefixes(t *testing.T) {
	ns := netnstest.New(t)
	ns.MustRun(t, "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	ns.MustRun(t, "ip", "link", "set", "d0", "up")
	ns.MustRun(t, "ip", "addr", "add", "192.0.2.5/28", "dev", "d0")
	ns.MustRun(t, "ip", "-6", "addr", "add", "2001:db8:5::5/64", "dev", "d0", "nodad")
	h := hostIn(t, ns)
	for _, want := range []string{"192.0.2.0/28", "2001:db8:5::/64"} {
		if !slices.Contains(h.Prefixes, netip.MustParsePrefix(want)) {
			t.Errorf("prefix %s not read: %+v", want, h)
		}
	}
	if !h.Internal(netip.MustParseAddr("192.0.2.1")) || !h.Internal(netip.MustParseAddr("2001:db8:5::1")) {
		t.Errorf("on-link neighbours not internal: %+v", h)
	}
	ns.MustRun(t, "ip", "addr", "add", "198.51.100.130/26", "dev", "d0")
	h2 := hostIn(t, ns)
	if h.Equal(h2) || !h2.Internal(netip.MustParseAddr("198.51.100.129")) {
		t.Errorf("a new prefix is not seen: %+v", h2)
	}
	if !h2.Equal(hostIn(t, ns)) {
		t.Errorf("two reads of an unchanged host differ")
	}
}

// hostIn runs HostAddrs on a thread inside ns; the thread is discarded.
func hostIn(t *testing.T, ns *netnstest.NS) Host {
	t.Helper()
	type res struct {
		h   Host
		err error
	}
	ch := make(chan res)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Setns(ns.FD, unix.CLONE_NEWNET); err != nil {
			ch <- res{err: err}
			return
		}
		h, err := HostAddrs()
		ch <- res{h, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.h
}
