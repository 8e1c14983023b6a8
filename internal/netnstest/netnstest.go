// Package netnstest creates fresh network namespaces for kernel tests and
// removes them through t.Cleanup.
package netnstest

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// NS is a named network namespace with loopback up.
type NS struct {
	Name string
	FD   int // open on /run/netns/Name, closed at cleanup
}

// New creates a fresh namespace; the test fails (or skips outside the test
// command) when not root.
func New(t testing.TB) *NS {
	t.Helper()
	testhost.RequireRoot(t)
	name := fmt.Sprintf("aisb-t%06d", rand.IntN(1000000))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v %s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open netns %s: %v", name, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	ns := &NS{Name: name, FD: fd}
	ns.MustRun(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Command returns argv run inside the namespace.
func (ns *NS) Command(argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name}, argv...)...)
}

// MustRun runs argv inside the namespace and returns its output, failing the
// test on error.
func (ns *NS) MustRun(t testing.TB, argv ...string) string {
	t.Helper()
	out, err := ns.Command(argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %v: %v\n%s", ns.Name, argv, err, out)
	}
	return string(out)
}

// Veth links ns to a new test host namespace: ns gets local/24 on its end, the
// host namespace gets peer/24 and listens there. It returns the host namespace.
func (ns *NS) Veth(t testing.TB, local, peer string) *NS {
	t.Helper()
	host := New(t)
	a, b := ns.Name[len(ns.Name)-6:]+"a", ns.Name[len(ns.Name)-6:]+"b"
	ns.MustRun(t, "ip", "link", "add", "v"+a, "type", "veth", "peer", "name", "v"+b, "netns", host.Name)
	ns.MustRun(t, "ip", "addr", "add", local+"/24", "dev", "v"+a)
	ns.MustRun(t, "ip", "link", "set", "v"+a, "up")
	host.MustRun(t, "ip", "addr", "add", peer+"/24", "dev", "v"+b)
	host.MustRun(t, "ip", "link", "set", "v"+b, "up")
	return host
}
