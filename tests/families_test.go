package tests

import (
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestSocketFamiliesInRootlessContainer runs the real entrypoint as the first
// process of a rootless container: the agent opens UNIX, INET, INET6 and
// NETLINK sockets and no other family, and cannot set up io_uring, also when
// Podman's own seccomp profile is off. Controls: the same probes in a plain
// container. Sockets are opened and closed; nothing is sent over them.
func TestSocketFamiliesInRootlessContainer(t *testing.T) {
	parallel(t)
	testhost.Require(t)
	ep := testhost.Binary(t, "cmd/aisb-entrypoint")
	probe := testhost.Binary(t, "tests/probe")
	gatePort := listenLoopback(t, "gate")
	h := helpers[0]
	policy := writePolicy(t, contract.Policy{Version: 1, Mode: contract.ModeAllow,
		Gate: &contract.Endpoint{Addr: netip.MustParseAddr(h.mapped), Port: uint16(gatePort)}})
	sandboxed := func(podmanArgs []string, argv ...string) testhost.Result {
		args := append([]string{"run", "--rm", "--network=" + h.network}, entrypointCaps...)
		args = append(append(args, podmanArgs...), "-v", ep+":/aisb-entrypoint:ro", "-v", policy+":/etc/aisb/policy.json:ro",
			"-v", probe+":/probe:ro", "--entrypoint=/aisb-entrypoint", testhost.BaseImage)
		return testhost.Podman(t, append(args, argv...)...)
	}
	plain := func(podmanArgs []string, argv ...string) testhost.Result {
		args := append([]string{"run", "--rm", "--network=" + h.network}, podmanArgs...)
		args = append(args, "-v", probe+":/probe:ro", testhost.BaseImage, "/probe")
		return testhost.Podman(t, append(args, argv...)...)
	}
	parse := func(r testhost.Result) map[int]string {
		got := map[int]string{}
		for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
			n, res, _ := strings.Cut(l, " ")
			if i, err := strconv.Atoi(n); err == nil {
				got[i] = res
			}
		}
		if len(got) != unix.AF_MAX {
			t.Fatalf("probe families: %s", r)
		}
		return got
	}
	allowed := map[int]bool{unix.AF_UNIX: true, unix.AF_INET: true, unix.AF_INET6: true, unix.AF_NETLINK: true}
	unconfined := []string{"--security-opt=seccomp=unconfined"}

	// Controls: Podman's default profile lets a plain container open
	// AF_VSOCK, and with NET_RAW AF_PACKET and AF_XDP; without that profile
	// io_uring works.
	ctl := parse(plain([]string{"--cap-add=NET_RAW"}, "families"))
	for _, f := range []int{unix.AF_VSOCK, unix.AF_PACKET, unix.AF_XDP} {
		if ctl[f] != "opened" {
			t.Fatalf("control: family %d does not open in a plain container (%s)", f, ctl[f])
		}
	}
	if r := plain(unconfined, "io_uring"); r.Code != 0 {
		t.Fatalf("control: io_uring in a plain unconfined container: %s", r)
	}

	for _, c := range []struct {
		name string
		args []string
	}{{"podman's seccomp profile", nil}, {"seccomp=unconfined", unconfined}} {
		t.Run(c.name, func(t *testing.T) {
			got := parse(sandboxed(c.args, "--", "/probe", "families"))
			for n := 0; n < unix.AF_MAX; n++ {
				if allowed[n] && got[n] != "opened" {
					t.Errorf("allowed family %d: %s", n, got[n])
				}
				if !allowed[n] && got[n] != "EAFNOSUPPORT" {
					t.Errorf("family %d: %s, want EAFNOSUPPORT (plain container: %s)", n, got[n], ctl[n])
				}
			}
			for _, name := range []string{"vsock", "packet", "xdp"} {
				if r := sandboxed(c.args, "--", "/probe", "family", name); r.Code != 1 || !strings.Contains(r.Stdout, "EAFNOSUPPORT") {
					t.Errorf("%s socket: %s", name, r)
				}
			}
			if r := sandboxed(c.args, "--", "/probe", "io_uring"); r.Code != 1 || !strings.Contains(r.Stdout, "ENOSYS") {
				t.Errorf("io_uring: %s", r)
			}
			for _, argv := range [][]string{{"socketpair"}, {"netlink-route"}, {"tcp", hostPort(h.mapped, gatePort)}} {
				if r := sandboxed(c.args, append([]string{"--", "/probe"}, argv...)...); r.Code != 0 {
					t.Errorf("%v: %s", argv, r)
				}
			}
		})
	}

	// The filter cannot be installed (a runtime profile refusing it): 77,
	// the command never runs, and --allow-unenforced does not change that.
	profile := filepath.Join(testhost.AgentDir(t), "no-seccomp.json")
	os.WriteFile(profile, []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
		{"names": ["prctl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "args": [{"index": 0, "value": 22, "op": "SCMP_CMP_EQ"}]},
		{"names": ["seccomp"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}`), 0o644)
	for _, flags := range [][]string{{"--"}, {"--allow-unenforced", "--"}} {
		r := sandboxed([]string{"--security-opt=seccomp=" + profile}, append(flags, "echo", "COMMAND-RAN")...)
		if r.Code != 77 || strings.Contains(r.Stdout, "COMMAND-RAN") || !strings.Contains(r.Stderr, "restrict socket families") {
			t.Errorf("filter refused, %v: %s", flags, r)
		}
	}
	// Control: the same container without that profile runs the command.
	if r := sandboxed(nil, "--", "echo", "COMMAND-RAN"); r.Code != 0 || !strings.Contains(r.Stdout, "COMMAND-RAN") {
		t.Errorf("control: %s", r)
	}
}
