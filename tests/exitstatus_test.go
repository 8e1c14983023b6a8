package tests

import (
	"strconv"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestCommandCannotForgeEnforcementFailure: a command that exits 77 or 78 is
// reported as that command's status; "could not be enforced" comes only from
// the entrypoint's own account, which the command cannot write.
func TestCommandCannotForgeEnforcementFailure(t *testing.T) {
	a := newAisb(t, testBaseImage(t), dnsConfig())
	for _, mode := range []string{"none", "allow"} {
		for _, code := range []int{77, 78} {
			r := a.run(t, "run", "--net", mode, "--harness", "shell", "--", "sh", "-c",
				"echo ran; echo '{\"outcome\":\"failed\",\"code\":77,\"step\":\"install table\"}' > /run/aisb/entrypoint.status; exit "+strconv.Itoa(code))
			if r.Code != code || !strings.Contains(r.Stdout, "ran") {
				t.Errorf("--net %s, exit %d: %s", mode, code, r)
			}
			for _, lie := range []string{"could not be enforced", "did not run", "policy was missing or invalid"} {
				if strings.Contains(r.Stderr, lie) {
					t.Errorf("--net %s: the command's exit %d was reported as %q: %s", mode, code, lie, r)
				}
			}
		}
	}
}

// TestAllowUnenforcedStillEnforces: --allow-unenforced only matters when the
// table cannot be installed; where it can, the sandbox is as closed as ever.
func TestAllowUnenforcedStillEnforces(t *testing.T) {
	base := testBaseImage(t)
	a := newAisb(t, base, dnsConfig())
	up := testhost.UpstreamAddr
	plainControl(t, base, "tcp", up+":80")
	r := a.run(t, "run", "--allow-unenforced", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c",
		"probe tcp "+up+":80; echo direct=$?; probe http-proxy $HTTP_PROXY http://allowed.test/; echo gate=$?")
	if !strings.Contains(r.Stdout, "direct=1") || !strings.Contains(r.Stdout, "gate=0") {
		t.Errorf("--allow-unenforced on a host that can enforce: %s", r)
	}
	if strings.Contains(r.Stderr, "NOT enforced") {
		t.Errorf("said unenforced although the table was installed: %s", r.Stderr)
	}
}

// TestStatusReadFromUpperDirectory: with Podman on this host, aisb reads the
// entrypoint's status from the stopped container's upper directory instead
// of an archive copy (which mounts the container's storage, ~100 ms of
// every start-up), and what it reads is the entrypoint's: a session runs
// without a word about its status, and a command that writes a lie into
// the status file (TestCommandCannotForgeEnforcementFailure) cannot.
func TestStatusReadFromUpperDirectory(t *testing.T) {
	a := newAisb(t, testBaseImage(t), dnsConfig())
	for _, mode := range []string{"none", "allow"} {
		r := a.runEnv(t, []string{"AISB_TRACE=1"}, "run", "--net", mode, "--harness", "shell", "--", "sh", "-c",
			"echo lie > /run/aisb/entrypoint.status && echo WROTE; exit 3")
		if r.Code != 3 || strings.Contains(r.Stdout, "WROTE") {
			t.Errorf("--net %s: %s", mode, r)
		}
		if !strings.Contains(r.Stderr, "entrypoint's status read from the container's upper directory") {
			t.Errorf("--net %s: the status was not read from the upper directory: %s", mode, r.Stderr)
		}
		if strings.Contains(r.Stderr, "left no account") || strings.Contains(r.Stderr, "did not run") {
			t.Errorf("--net %s: the entrypoint's account was not read: %s", mode, r.Stderr)
		}
	}
}
