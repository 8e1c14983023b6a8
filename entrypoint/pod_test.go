package entrypoint_test

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/entrypoint"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/netnstest"
	"github.com/aisb-dev/aisb/internal/testhost"
	"github.com/aisb-dev/aisb/ruleset"
)

// TestPodSelfAddr: the agent's wait for the gate connects from the address
// the audit drops as squid's own check.
func TestPodSelfAddr(t *testing.T) {
	if entrypoint.PodSelfAddr != audit.SelfAddr {
		t.Fatalf("PodSelfAddr %s, audit.SelfAddr %s", entrypoint.PodSelfAddr, audit.SelfAddr)
	}
}

// TestPodTableAndRecord runs `aisb-entrypoint table` in a fresh namespace
// as root: the kernel then holds the pod's table (listed by nft) and the
// record is that table in that namespace. `aisb-entrypoint pod` then runs
// its command as the agent (setpriv: uid 1000, no capability, no_new_privs)
// once the gate's port listens; as root, or with the record tampered or
// missing, it exits 77 and never runs it.
func TestPodTableAndRecord(t *testing.T) {
	testhost.RequireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		testhost.Skip(t, "setpriv is missing: %v", err)
	}
	ep := testhost.Binary(t, "cmd/aisb-entrypoint")
	ns := netnstest.New(t)
	dir := testhost.AgentDir(t)
	os.Chmod(dir, 0o755)
	// The test upstream, in the namespace, is the gate on its loopback:
	// the agent's entrypoint waits until its port listens.
	pol := contract.Policy{Version: 1, Mode: contract.ModeAllow, GateUID: 13,
		Gate: &contract.Endpoint{Addr: netip.MustParseAddr("127.0.0.1"), Port: 80}}
	policy := filepath.Join(testhost.AgentDir(t), "policy.json")
	b, _ := pol.Marshal()
	if err := os.WriteFile(policy, b, 0o644); err != nil {
		t.Fatal(err)
	}

	if out, err := ns.Command(ep, "table", "--policy", policy, "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("table: %v %s", err, out)
	}
	rs, _ := ruleset.Build(pol)
	if listed := ns.MustRun(t, "nft", "list", "ruleset"); listed != rs.Text() {
		t.Errorf("the kernel holds\n%s\nwant\n%s", listed, rs.Text())
	}
	record, err := os.ReadFile(filepath.Join(dir, contract.PodRecord))
	if err != nil {
		t.Fatal(err)
	}
	first, table, _ := strings.Cut(string(record), "\n")
	if !strings.HasPrefix(first, "# aisb pod table, verified in net:[") || table != rs.Text() {
		t.Errorf("record:\n%s", record)
	}

	gate := ns.Command(testhost.Binary(t, "tests/upstream"), "-log", filepath.Join(t.TempDir(), "upstream.log"))
	if err := gate.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.Process.Kill(); gate.Wait() })

	marker := filepath.Join(testhost.AgentDir(t), "ran")
	asAgent := func(argv ...string) []string {
		return append([]string{"setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"}, argv...)
	}
	pod := func(user []string) (int, string) {
		argv := append(user, ep, "pod", "--policy", policy, "--dir", dir, "--gate-wait", "10s", "--", "touch", marker)
		out, err := ns.Command(argv...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		return 0, string(out)
	}
	if code, out := pod(asAgent()); code != 0 {
		t.Fatalf("pod as the agent with the record intact: exit %d %s", code, out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the command did not run: %v", err)
	}
	os.Remove(marker)
	for name, c := range map[string]struct {
		user   []string
		before func()
	}{
		"as root":  {nil, func() {}},
		"tampered": {asAgent(), func() { os.WriteFile(filepath.Join(dir, contract.PodRecord), append(record, "# more\n"...), 0o644) }},
		"other netns": {asAgent(), func() {
			os.WriteFile(filepath.Join(dir, contract.PodRecord), []byte(strings.Replace(string(record), "net:[", "net:[1", 1)), 0o644)
		}},
		"missing": {asAgent(), func() { os.Remove(filepath.Join(dir, contract.PodRecord)) }},
	} {
		c.before()
		if code, out := pod(c.user); code != entrypoint.ExitEnforce {
			t.Errorf("%s: exit %d, want 77: %s", name, code, out)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%s: the command ran", name)
			os.Remove(marker)
		}
		os.WriteFile(filepath.Join(dir, contract.PodRecord), record, 0o644)
	}
}
