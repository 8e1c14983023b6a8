package entrypoint_test

import (
	"debug/elf"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/netnstest"
	"github.com/aisb-dev/aisb/internal/testhost"
	"github.com/aisb-dev/aisb/ruleset"
)

// Addresses inside the tests' own namespaces only.
const (
	sandboxAddr = "198.51.100.20"
	hostAddr    = "198.51.100.21" // the test host; the gate is its port 8080
	otherAddr   = "198.51.100.22" // a second address of the same test host
	hostAddr6   = "2001:db8:1::21"
	gatePort    = "8080"
)

type sandbox struct {
	ns, host   *netnstest.NS
	entrypoint string
	probe      string
	policy     string
}

// newSandbox makes a fresh namespace linked by a veth to a test host running
// the upstream server (80, 8080, 443, 22, UDP 9999) on two IPv4 addresses and
// one IPv6 address, and writes an allow-mode policy whose gate is hostAddr:8080.
func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	testhost.RequireRoot(t)
	s := &sandbox{
		entrypoint: testhost.Binary(t, "cmd/aisb-entrypoint"),
		probe:      testhost.Binary(t, "tests/probe"),
		ns:         netnstest.New(t),
	}
	s.host = s.ns.Veth(t, sandboxAddr, hostAddr)
	s.host.MustRun(t, "ip", "addr", "add", otherAddr+"/24", "dev", vethOf(t, s.host))
	s.host.MustRun(t, "ip", "-6", "addr", "add", hostAddr6+"/64", "dev", vethOf(t, s.host), "nodad")
	s.ns.MustRun(t, "ip", "-6", "addr", "add", "2001:db8:1::20/64", "dev", vethOf(t, s.ns), "nodad")

	dir := t.TempDir()
	up := s.host.Command(testhost.Binary(t, "tests/upstream"), "-log", filepath.Join(dir, "upstream.log"))
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Process.Kill(); up.Wait() })

	s.policy = writePolicy(t, contract.Policy{Version: 1, Mode: contract.ModeAllow,
		Gate: &contract.Endpoint{Addr: mustAddr(hostAddr), Port: 8080}})
	// Wait for the upstream: this is also the first control.
	for i := 0; ; i++ {
		if r := s.plain(t, "tcp", hostAddr+":"+gatePort); r.Code == 0 {
			break
		} else if i == 50 {
			t.Fatalf("test host never answered: %s", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s
}

func vethOf(t *testing.T, ns *netnstest.NS) string {
	out := ns.MustRun(t, "ip", "-o", "link", "show", "type", "veth")
	name, _, _ := strings.Cut(strings.TrimSpace(strings.SplitN(out, ":", 3)[1]), "@")
	return name
}

func writePolicy(t *testing.T, p contract.Policy) string {
	t.Helper()
	b, _ := json.Marshal(p)
	path := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// plain runs the probe in the namespace as root, without the entrypoint: the control.
func (s *sandbox) plain(t *testing.T, args ...string) testhost.Result {
	t.Helper()
	return testhost.Run(t, s.ns.Command(append([]string{s.probe}, args...)...))
}

// enforced runs argv through the entrypoint in the namespace.
func (s *sandbox) enforced(t *testing.T, argv ...string) testhost.Result {
	t.Helper()
	return testhost.Run(t, s.ns.Command(append([]string{s.entrypoint, "--policy", s.policy, "--status", statusFile(t), "--"}, argv...)...))
}

func (s *sandbox) probeEnforced(t *testing.T, args ...string) testhost.Result {
	t.Helper()
	return s.enforced(t, append([]string{s.probe}, args...)...)
}

// TestEnforcedNetwork: each target is first shown reachable without the
// entrypoint (control), then through it: only the gate's address and port
// and loopback get through.
func TestEnforcedNetwork(t *testing.T) {
	s := newSandbox(t)
	cases := []struct {
		name    string
		probe   []string
		allowed bool
	}{
		{"gate address and port", []string{"tcp", hostAddr + ":" + gatePort}, true},
		{"loopback", []string{"loopback"}, true},
		{"another port of the gate's host", []string{"tcp", hostAddr + ":80"}, false},
		{"ssh port of the gate's host", []string{"tcp", hostAddr + ":22"}, false},
		{"another address", []string{"tcp", otherAddr + ":" + gatePort}, false},
		{"UDP", []string{"udp", hostAddr + ":9999"}, false},
		{"IPv6", []string{"tcp", "[" + hostAddr6 + "]:" + gatePort}, false},
	}
	// Controls first: once the entrypoint ran, the namespace keeps its table.
	for _, c := range cases {
		if r := s.plain(t, c.probe...); r.Code != 0 {
			t.Fatalf("control %s: not reachable without the sandbox: %s", c.name, r)
		}
	}
	for _, c := range cases {
		r := s.probeEnforced(t, c.probe...)
		if got := r.Code == 0; got != c.allowed {
			t.Errorf("%s: reached=%v, want %v: %s", c.name, got, c.allowed, r)
		}
	}
	want, _ := ruleset.Build(contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: &contract.Endpoint{Addr: mustAddr(hostAddr), Port: 8080}})
	if got := s.ns.MustRun(t, "nft", "list", "ruleset"); got != want.Text() {
		t.Errorf("kernel holds\n%s\nwant\n%s", got, want.Text())
	}
}

func TestSocketsAfterDrop(t *testing.T) {
	s := newSandbox(t)
	// ICMP datagram sockets need no privilege where ping_group_range admits
	// the group; admit every group here, so only the table can stop the echo.
	s.ns.MustRun(t, "sysctl", "-qw", "net.ipv4.ping_group_range=0 2147483647")
	// Controls first: once the entrypoint ran, the namespace keeps its table.
	if r := s.plain(t, "ping", hostAddr); r.Code != 0 {
		t.Fatalf("control: ping without the sandbox: %s", r)
	}
	for _, kind := range []string{"raw", "packet"} {
		if r := s.plain(t, "socket", kind); r.Code != 0 {
			t.Fatalf("control: root cannot open a %s socket: %s", kind, r)
		}
	}
	if r := s.probeEnforced(t, "ping", hostAddr); r.Code == 0 {
		t.Errorf("ICMP echo got through the table: %s", r)
	}
	for _, kind := range []string{"raw", "packet"} {
		if r := s.probeEnforced(t, "socket", kind); r.Code == 0 {
			t.Errorf("%s socket opened after the drop: %s", kind, r)
		}
	}
}

// TestPrivilegesDropped reads the exec'd command's own status.
func TestPrivilegesDropped(t *testing.T) {
	s := newSandbox(t)
	r := s.probeEnforced(t, "status")
	if r.Code != 0 {
		t.Fatal(r)
	}
	for _, want := range []string{"Uid: 1000 1000 1000 1000", "Gid: 1000 1000 1000 1000", "Groups:\n",
		"CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000",
		"CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1", "euid: 1000"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.Stdout)
		}
	}
}

// TestSetuidGivesNothingBack: a setuid-root binary runs as the agent.
func TestSetuidGivesNothingBack(t *testing.T) {
	s := newSandbox(t)
	dir := testhost.AgentDir(t)
	suid := filepath.Join(dir, "probe-suid")
	b, _ := os.ReadFile(s.probe)
	if err := os.WriteFile(suid, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	// Control: without no_new_privs the same binary does give root back.
	ctl := testhost.Run(t, exec.Command("setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", suid, "status"))
	if !strings.Contains(ctl.Stdout, "euid: 0") {
		t.Fatalf("control: the setuid binary does not give root to uid 1000 here: %s", ctl)
	}
	r := s.enforced(t, suid, "status")
	if !strings.Contains(r.Stdout, "euid: 1000") || !strings.Contains(r.Stdout, "CapEff: 0000000000000000") {
		t.Errorf("setuid binary under the sandbox: %s", r)
	}
}

// TestAgentCannotChangeTheTable: netlink changes fail with EPERM, also from a
// new user namespace, and a new network namespace has no route out.
func TestAgentCannotChangeTheTable(t *testing.T) {
	s := newSandbox(t)
	for _, op := range []string{"list", "flush", "delete", "accept"} {
		r := s.probeEnforced(t, "nft", op)
		if r.Code == 0 || !strings.Contains(r.Stdout, "operation not permitted") {
			t.Errorf("nft %s from the sandbox: %s", op, r)
		}
	}
	// Control: unshare -r works for the agent and makes it root in a new user namespace.
	if r := s.enforced(t, "unshare", "-r", "id", "-u"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "0" {
		t.Fatalf("control: unshare -r does not work here: %s", r)
	}
	for _, op := range []string{"flush", "delete", "accept"} {
		r := s.enforced(t, "unshare", "-r", s.probe, "nft", op)
		if r.Code == 0 || !strings.Contains(r.Stdout, "operation not permitted") {
			t.Errorf("nft %s from a new user namespace: %s", op, r)
		}
	}
	// Control: the gate is reachable from the sandbox itself ...
	if r := s.probeEnforced(t, "tcp", hostAddr+":"+gatePort); r.Code != 0 {
		t.Fatalf("control: gate not reachable from the sandbox: %s", r)
	}
	// ... but not from a fresh network namespace, which has no route out.
	if r := s.enforced(t, "unshare", "-rn", s.probe, "tcp", hostAddr+":"+gatePort); r.Code == 0 {
		t.Errorf("a new network namespace reached the gate's host: %s", r)
	}
	want, _ := ruleset.Build(contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: &contract.Endpoint{Addr: mustAddr(hostAddr), Port: 8080}})
	if got := s.ns.MustRun(t, "nft", "list", "ruleset"); got != want.Text() {
		t.Errorf("the table changed:\n%s", got)
	}
}

// TestFailsClosed: the command never runs when the policy is missing or
// invalid (78) or the table cannot be installed (77).
func TestFailsClosed(t *testing.T) {
	testhost.RequireRoot(t)
	ep := testhost.Binary(t, "cmd/aisb-entrypoint")
	ns := netnstest.New(t)
	dir := testhost.AgentDir(t)
	valid := writePolicy(t, contract.Policy{Version: 1, Mode: contract.ModeNone})
	invalid := filepath.Join(dir, "invalid.json")
	os.WriteFile(invalid, []byte(`{"version":1,"mode":"allow"}`), 0o644)
	unknown := filepath.Join(dir, "unknown.json")
	os.WriteFile(unknown, []byte(`{"version":1,"mode":"none","accept_all":true}`), 0o644)
	for _, c := range []struct {
		name   string
		prefix []string
		policy string
		want   int
		msg    string
		step   string
	}{
		{"missing policy", nil, filepath.Join(dir, "missing.json"), 78, "read policy", "read policy"},
		{"invalid policy", nil, invalid, 78, "allow mode needs the gate", "read policy"},
		{"unknown field", nil, unknown, 78, "unknown field", "read policy"},
		{"no CAP_NET_ADMIN", []string{"setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin"}, valid, 77, "install table", "install table"},
		{"no CAP_SETPCAP", []string{"setpriv", "--bounding-set=-setpcap", "--inh-caps=-setpcap"}, valid, 77, "drop privileges", "drop privileges"},
	} {
		t.Run(c.name, func(t *testing.T) {
			marker := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			status := statusFile(t)
			argv := append(append(c.prefix, ep, "--policy", c.policy, "--status", status, "--"), "touch", marker)
			r := testhost.Run(t, ns.Command(argv...))
			if r.Code != c.want || !strings.Contains(r.Stderr, c.msg) {
				t.Errorf("exit %d, want %d with %q: %s", r.Code, c.want, c.msg, r)
			}
			// The entrypoint's own account says the same, in the channel the
			// command cannot write.
			if st := readStatus(t, status); st.Outcome != contract.OutcomeFailed || st.Code != c.want || st.Step != c.step {
				t.Errorf("status %+v, want failed %d at %s", st, c.want, c.step)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the command ran")
			}
		})
	}
	// Control: with everything in place the same command does run.
	marker := filepath.Join(dir, "control")
	if r := testhost.Run(t, ns.Command(ep, "--policy", valid, "--status", statusFile(t), "--", "touch", marker)); r.Code != 0 {
		t.Fatalf("control: %s", r)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("control: the command did not run: %v", err)
	}
}

// TestWaitsForTheGate: with await_gate in its policy the entrypoint installs
// the table and drops its privileges, then waits for aisb's word that the
// gate is ready (contract.GateReadyFile beside the policy) before it execs
// the command: without the word the command does not run, and after
// --gate-wait, or at a signal meanwhile, it never does (77, step "wait for
// the gate"). The control: the word given, the same command runs.
func TestWaitsForTheGate(t *testing.T) {
	testhost.RequireRoot(t)
	ep := testhost.Binary(t, "cmd/aisb-entrypoint")
	ns := netnstest.New(t)
	run := func(wait string) (dir string, cmd *exec.Cmd, status string) {
		dir = testhost.AgentDir(t)
		b, _ := json.Marshal(contract.Policy{Version: 1, Mode: contract.ModeAllow, AwaitGate: true,
			Gate: &contract.Endpoint{Addr: mustAddr(hostAddr), Port: 8080}})
		if err := os.WriteFile(filepath.Join(dir, contract.PolicyFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		status = statusFile(t)
		cmd = ns.Command(ep, "--policy", filepath.Join(dir, contract.PolicyFile), "--status", status, "--gate-wait", wait, "--", "touch", filepath.Join(dir, "ran"))
		return dir, cmd, status
	}
	ran := func(dir string) bool {
		_, err := os.Stat(filepath.Join(dir, "ran"))
		return err == nil
	}

	// The word comes late: until then the command does not run.
	dir, cmd, status := run("20s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("the entrypoint ended (%v) before the gate was said ready", err)
	case <-time.After(500 * time.Millisecond):
	}
	if ran(dir) {
		t.Fatal("the command ran before the gate was said ready")
	}
	if err := os.WriteFile(filepath.Join(dir, contract.GateReadyFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || !ran(dir) {
			t.Errorf("control: once the gate was said ready the command did not run (%v)", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the entrypoint did not go on within 10 s of the word")
	}
	if st := readStatus(t, status); st.Outcome != contract.OutcomeEnforced {
		t.Errorf("status %+v, want enforced", st)
	}

	// No word at all: the command never runs.
	dir, cmd, status = run("300ms")
	r := testhost.Run(t, cmd)
	if r.Code != contract.ExitEnforce || !strings.Contains(r.Stderr, contract.StepAwaitGate) || ran(dir) {
		t.Errorf("without the word: want exit %d at %q and no command: %s (ran %t)", contract.ExitEnforce, contract.StepAwaitGate, r, ran(dir))
	}
	if st := readStatus(t, status); st.Outcome != contract.OutcomeFailed || st.Step != contract.StepAwaitGate {
		t.Errorf("status %+v, want failed at %s", st, contract.StepAwaitGate)
	}

	// A signal while it waits (aisb forwards its own): the command never
	// runs, and the entrypoint says why.
	dir, cmd, status = run("20s")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != contract.ExitEnforce || !strings.Contains(stderr.String(), "terminated while waiting for the gate") || ran(dir) {
		t.Errorf("SIGTERM while waiting: %v, stderr %q (ran %t)", err, stderr.String(), ran(dir))
	}
	if st := readStatus(t, status); st.Outcome != contract.OutcomeFailed || st.Step != contract.StepAwaitGate {
		t.Errorf("status %+v, want failed at %s", st, contract.StepAwaitGate)
	}
}

// TestAllowUnenforced: --allow-unenforced still installs the table when it
// can; only when installing fails does the command run without it, loudly,
// and the entrypoint's status says which happened.
func TestAllowUnenforced(t *testing.T) {
	s := newSandbox(t)
	if r := s.plain(t, "tcp", hostAddr+":80"); r.Code != 0 {
		t.Fatalf("control: %s", r)
	}
	status := statusFile(t)
	r := testhost.Run(t, s.ns.Command(s.entrypoint, "--allow-unenforced", "--policy", s.policy, "--status", status, "--", s.probe, "tcp", hostAddr+":80"))
	if r.Code == 0 || strings.Contains(r.Stderr, "NOT enforced") {
		t.Errorf("with a table that can be installed, --allow-unenforced let the command out: %s", r)
	}
	if got := s.ns.MustRun(t, "nft", "list", "ruleset"); !strings.Contains(got, "table inet aisb") {
		t.Errorf("no table was installed: %q", got)
	}
	if st := readStatus(t, status); st.Outcome != contract.OutcomeEnforced {
		t.Errorf("status %+v, want enforced", st)
	}
	s.ns.MustRun(t, "nft", "delete", "table", "inet", "aisb")

	// Installing fails (no CAP_NET_ADMIN): the command runs, unenforced,
	// said on stderr and in the status.
	status = statusFile(t)
	r = testhost.Run(t, s.ns.Command("setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin",
		s.entrypoint, "--allow-unenforced", "--policy", s.policy, "--status", status, "--", s.probe, "tcp", hostAddr+":80"))
	if r.Code != 0 || !strings.Contains(r.Stderr, "NOT enforced") || !strings.Contains(r.Stderr, "install table") {
		t.Errorf("unenforced run: %s", r)
	}
	if st := readStatus(t, status); st.Outcome != contract.OutcomeUnenforced || st.Step != "install table" {
		t.Errorf("status %+v, want unenforced at install table", st)
	}
	r = testhost.Run(t, s.ns.Command("setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin",
		s.entrypoint, "--allow-unenforced", "--policy", s.policy, "--status", statusFile(t), "--", s.probe, "status"))
	if !strings.Contains(r.Stdout, "CapBnd: 0000000000000000") || !strings.Contains(r.Stdout, "euid: 1000") {
		t.Errorf("the privilege drop did not happen: %s", r)
	}
}

// TestStatusIsTheEntrypointsOwn: a command that exits 77 leaves the status
// "enforced", and it cannot rewrite the status file (owned by root, written
// through a descriptor closed on exec).
func TestStatusIsTheEntrypointsOwn(t *testing.T) {
	s := newSandbox(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	status := filepath.Join(dir, "status")
	r := testhost.Run(t, s.ns.Command(s.entrypoint, "--policy", s.policy, "--status", status, "--", "sh", "-c",
		`echo '{"outcome":"failed","code":77,"step":"install table"}' > `+status+`; ls -l /proc/self/fd/ >&2; exit 77`))
	if r.Code != 77 || !strings.Contains(r.Stderr, "Permission denied") {
		t.Errorf("the command: %s", r)
	}
	if st := readStatus(t, status); st.Outcome != contract.OutcomeEnforced || st.Code != 0 {
		t.Errorf("status %+v after the command tried to forge it, want enforced", st)
	}
	if strings.Contains(r.Stderr, "-> "+status) {
		t.Errorf("the command inherited the status descriptor: %s", r.Stderr)
	}
}

func statusFile(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "status")
}

func readStatus(t *testing.T, path string) contract.Status {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the entrypoint wrote no status: %v", err)
	}
	st, err := contract.ParseStatus(b)
	if err != nil {
		t.Fatalf("status %q: %v", b, err)
	}
	return st
}

// TestDependencies: the entrypoint stays small and never links the podman
// bindings, TOML or the CLI framework.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/aisb-dev/aisb/cmd/aisb-entrypoint").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, forbidden := range []string{"github.com/containers/", "github.com/BurntSushi/toml", "github.com/urfave/cli"} {
		if strings.Contains(string(out), forbidden) {
			t.Errorf("aisb-entrypoint depends on %s", forbidden)
		}
	}
}

func TestStaticAndSmall(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "aisb-entrypoint")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "github.com/aisb-dev/aisb/cmd/aisb-entrypoint")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	fi, _ := os.Stat(bin)
	t.Logf("aisb-entrypoint: %d bytes", fi.Size())
	if fi.Size() >= 6<<20 {
		t.Errorf("aisb-entrypoint is %d bytes, want under 6 MiB", fi.Size())
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("aisb-entrypoint is dynamically linked")
		}
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestRelayFailsClosed: a transparent policy's command runs only once the
// relay is in place and verified; a relay that does not start, does not
// say ready, or finds no gate, and a namespace where the agent could bind
// the relay's ports, are each exit 77 at step "start the relay" with the
// command not run. The control: the real relay starts, the command runs as
// the agent, and its DNS query to any server is answered by the relay from
// the mapped range (the table redirected it).
func TestRelayFailsClosed(t *testing.T) {
	testhost.RequireRoot(t)
	ep := testhost.Binary(t, "cmd/aisb-entrypoint")
	probe := testhost.Binary(t, "tests/probe")
	dir := testhost.AgentDir(t)
	policy := writePolicy(t, contract.Policy{Version: 1, Mode: contract.ModeAllow, Transparent: true,
		Gate: &contract.Endpoint{Addr: mustAddr(hostAddr), Port: 8080}})
	proxy := "HTTP_PROXY=http://aisb:token@" + hostAddr + ":8080"
	run := func(t *testing.T, ns *netnstest.NS, env []string, relayExe string, argv ...string) (testhost.Result, string, string) {
		resolv := filepath.Join(t.TempDir(), "resolv.conf")
		os.WriteFile(resolv, []byte("nameserver "+hostAddr+"\n"), 0o644)
		status := statusFile(t)
		// The entrypoint is PID 1 of a PID namespace of its own, as in a
		// sandbox: a relay it started ends (and is reaped) with the command.
		args := []string{"unshare", "--pid", "--fork", "--mount-proc", ep, "--policy", policy, "--status", status, "--resolv-conf", resolv}
		if relayExe != "" {
			args = append(args, "--relay", relayExe)
		}
		cmd := ns.Command(append(append(args, "--"), argv...)...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		// A relay that started outlives the command here (in a sandbox
		// it ends with the container): output goes to files, so that
		// nothing waits for the relay's stderr to close.
		out, _ := os.Create(filepath.Join(t.TempDir(), "out"))
		errf, _ := os.Create(filepath.Join(t.TempDir(), "err"))
		defer out.Close()
		defer errf.Close()
		cmd.Stdout, cmd.Stderr = out, errf
		var res testhost.Result
		if err := cmd.Run(); err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatal(err)
			}
			res.Code = ee.ExitCode()
		}
		b, _ := os.ReadFile(out.Name())
		e, _ := os.ReadFile(errf.Name())
		res.Stdout, res.Stderr = string(b), string(e)
		return res, status, resolv
	}
	for _, c := range []struct {
		name     string
		env      []string
		relayExe string
		sysctl   string
		msg      string
	}{
		{"relay fails", []string{proxy}, "/bin/false", "", "did not report ready"},
		{"relay exits at once", []string{proxy}, "/bin/true", "", "did not report ready"},
		{"no gate for the relay", nil, "", "", "did not report ready"},
		{"agent could bind its ports", []string{proxy}, "", "0", "ip_unprivileged_port_start is 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := netnstest.New(t)
			if c.sysctl != "" {
				ns.MustRun(t, "sysctl", "-w", "net.ipv4.ip_unprivileged_port_start="+c.sysctl)
			}
			marker := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			r, status, _ := run(t, ns, c.env, c.relayExe, "touch", marker)
			if r.Code != 77 || !strings.Contains(r.Stderr, c.msg) {
				t.Errorf("exit %d, want 77 with %q: %s", r.Code, c.msg, r)
			}
			if st := readStatus(t, status); st.Outcome != contract.OutcomeFailed || st.Step != "start the relay" {
				t.Errorf("status %+v, want failed at start the relay", st)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the command ran")
			}
		})
	}
	// Control: the relay in place, in a namespace with a route out.
	ns := newSandbox(t).ns
	r, _, resolv := run(t, ns, []string{proxy}, "", probe, "dns", hostAddr, "tp.test")
	if r.Code != 0 || !strings.Contains(r.Stdout, "answered rcode=0 answers=1") {
		t.Fatalf("control: %s", r)
	}
	if b, _ := os.ReadFile(resolv); string(b) != "nameserver 127.0.0.53\n" {
		t.Errorf("control: resolv.conf reads %q", b)
	}
}
