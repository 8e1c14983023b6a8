package tests

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// entrypointCaps is the smallest capability set the entrypoint needs for its
// first moments (measured): the table, then the drop.
var entrypointCaps = []string{"--cap-drop=ALL", "--cap-add=NET_ADMIN,SETUID,SETGID,SETPCAP", "--security-opt=no-new-privileges"}

// TestEntrypointInRootlessContainer runs the real entrypoint as the first
// process of a rootless container under each network helper, with a "gate"
// on the host's loopback, and probes every way out next to its control.
func TestEntrypointInRootlessContainer(t *testing.T) {
	parallel(t)
	testhost.Require(t)
	ep := testhost.Binary(t, "cmd/aisb-entrypoint")
	probe := testhost.Binary(t, "tests/probe")
	gatePort := listenLoopback(t, "gate")
	otherPort := listenLoopback(t, "other host service")
	up := testhost.UpstreamAddr

	for _, h := range helpers {
		t.Run(h.name, func(t *testing.T) {
			policy := writePolicy(t, contract.Policy{Version: 1, Mode: contract.ModeAllow,
				Gate: &contract.Endpoint{Addr: netip.MustParseAddr(h.mapped), Port: uint16(gatePort)}})
			sandboxed := func(caps []string, argv ...string) testhost.Result {
				args := append([]string{"run", "--rm", "--network=" + h.network}, caps...)
				args = append(args, "-v", ep+":/aisb-entrypoint:ro", "-v", policy+":/etc/aisb/policy.json:ro",
					"-v", probe+":/probe:ro", "--entrypoint=/aisb-entrypoint", testhost.BaseImage, "--")
				return testhost.Podman(t, append(args, argv...)...)
			}
			cases := []struct {
				name    string
				probe   []string
				allowed bool
			}{
				{"gate on the mapped host loopback", []string{"tcp", hostPort(h.mapped, gatePort)}, true},
				{"loopback", []string{"loopback"}, true},
				{"another host loopback port", []string{"tcp", hostPort(h.mapped, otherPort)}, false},
				{"upstream HTTP", []string{"tcp", up + ":80"}, false},
				{"upstream HTTPS", []string{"tcp", up + ":443"}, false},
				{"upstream SSH", []string{"tcp", up + ":22"}, false},
				{"upstream UDP", []string{"udp", up + ":9999"}, false},
				{"upstream DNS", []string{"dns", up, "allowed.test"}, false},
				{"upstream DNS over TCP", []string{"dns-tcp", up, "allowed.test"}, false},
			}
			for _, c := range cases {
				if c.name == "loopback" {
					continue
				}
				if r := plainRun(t, h, probe, c.probe...); r.Code != 0 {
					t.Fatalf("control %s: not reachable from a plain container: %s", c.name, r)
				}
			}
			for _, c := range cases {
				r := sandboxed(entrypointCaps, append([]string{"/probe"}, c.probe...)...)
				if got := r.Code == 0; got != c.allowed {
					t.Errorf("%s: reached=%v, want %v: %s", c.name, got, c.allowed, r)
				}
			}

			r := sandboxed(entrypointCaps, "/probe", "status")
			for _, want := range []string{"Uid: 1000 1000 1000 1000", "CapInh: 0000000000000000", "CapPrm: 0000000000000000",
				"CapEff: 0000000000000000", "CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1"} {
				if !strings.Contains(r.Stdout, want) {
					t.Errorf("status in the container lacks %q: %s", want, r)
				}
			}
			for _, op := range []string{"flush", "delete", "accept"} {
				if r := sandboxed(entrypointCaps, "/probe", "nft", op); r.Code == 0 || !strings.Contains(r.Stdout, "operation not permitted") {
					t.Errorf("nft %s from the container: %s", op, r)
				}
			}
			// Without CAP_NET_ADMIN the entrypoint cannot lock the namespace:
			// 77, and the command never runs.
			r = sandboxed([]string{"--cap-drop=ALL", "--cap-add=SETUID,SETGID,SETPCAP", "--security-opt=no-new-privileges"}, "echo", "COMMAND-RAN")
			if r.Code != 77 || strings.Contains(r.Stdout, "COMMAND-RAN") || !strings.Contains(r.Stderr, "install table") {
				t.Errorf("without NET_ADMIN: %s", r)
			}
		})
	}
}
