package gate_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// A LAN of the test's own: a namespace serving HTTP and DNS on lanHost (and
// lanHost6), linked to the root namespace, whose end starts as the host
// address lanSelf/32 with a route, so lanHost is at first routed, not
// on-link. Its dnsmasq answers the names below and logs every query.
const (
	lanSelf   = "198.51.100.65"
	lanHost   = "198.51.100.66"
	lanSelf6  = "2001:db8:66::65"
	lanHost6  = "2001:db8:66::66"
	lanRecord = `198.51.100.66 lanpublic.test onlink.test
::ffff:198.51.100.66 mappedpublic.test
2001:db8:66::66 lan6.test
64:ff9b::c633:640a nat64.test
64:ff9b:1::c633:640a nat64local.test
2002:c633:640a::10 sixtofour.test
2001:0:c633:640a::10 teredo.test
fec0::10 sitelocal.test
::c633:640a v4compat.test
::ffff:10.255.77.10 mappedprivate.test
100::10 discard.test
`
)

type lan struct {
	hostIf string
	dnsLog string
}

func newLAN(t *testing.T) *lan {
	t.Helper()
	testhost.RequireRoot(t)
	ns := fmt.Sprintf("aisb-lan%04d", rand.IntN(10000))
	l := &lan{hostIf: "aisbl" + ns[len(ns)-4:]}
	mustIP(t, "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	mustIP(t, "link", "add", l.hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
	t.Cleanup(func() { exec.Command("ip", "link", "del", l.hostIf).Run() })
	mustIP(t, "addr", "add", lanSelf+"/32", "dev", l.hostIf)
	mustIP(t, "-6", "addr", "add", lanSelf6+"/128", "dev", l.hostIf, "nodad")
	mustIP(t, "link", "set", l.hostIf, "up")
	mustIP(t, "route", "add", lanHost+"/32", "dev", l.hostIf)
	mustIP(t, "-6", "route", "add", lanHost6+"/128", "dev", l.hostIf)
	mustIP(t, "-n", ns, "link", "set", "lo", "up")
	mustIP(t, "-n", ns, "addr", "add", lanHost+"/26", "dev", "eth0")
	mustIP(t, "-n", ns, "-6", "addr", "add", lanHost6+"/64", "dev", "eth0", "nodad")
	mustIP(t, "-n", ns, "link", "set", "eth0", "up")
	mustIP(t, "-n", ns, "route", "add", "default", "dev", "eth0")

	dir := t.TempDir()
	names := "lanpublic.test,onlink.test,mappedpublic.test,lan6.test"
	srv := exec.Command("ip", "netns", "exec", ns, testhost.Binary(t, "tests/upstream"), "-log", filepath.Join(dir, "up.log"), "-names", names)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	hostsFile := filepath.Join(dir, "hosts")
	os.WriteFile(hostsFile, []byte(lanRecord), 0o644)
	l.dnsLog = filepath.Join(dir, "dns.log")
	dns := exec.Command("ip", "netns", "exec", ns, "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--no-poll",
		"--addn-hosts="+hostsFile, "--local=/test/", "--log-queries", "--log-facility="+l.dnsLog, "--pid-file=",
		"--user=root", "--group=root", "--interface=eth0", "--bind-interfaces", "--cache-size=0")
	if err := dns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dns.Process.Kill(); dns.Wait() })
	for i := 0; ; i++ {
		out, _ := exec.Command("ip", "netns", "exec", ns, "ss", "-lnu").CombinedOutput()
		if exec.Command("curl", "-fsS", "--max-time", "1", "http://"+lanHost+"/").Run() == nil && strings.Contains(string(out), lanHost+":53") {
			break
		}
		if i == 50 {
			t.Fatalf("the test LAN did not come up: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return l
}

// gate starts a gate that resolves through the LAN's dnsmasq.
func (l *lan) gate(t *testing.T, c engine.Engine, img, session string, allow ...string) *gate.Gate {
	t.Helper()
	g, err := gate.Start(c, gate.Options{
		Session: session, Dir: testhost.UserDir(t), Image: img, Allowlist: hosts(t, allow...),
		DNS: []netip.Addr{netip.MustParseAddr(lanHost)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Stop(c) })
	sandboxOf(t, g)
	return g
}

func mustIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v %s", args, err, out)
	}
}
