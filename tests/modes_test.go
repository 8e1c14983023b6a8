package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// dnsConfig is a user config whose [network] resolves through the test
// upstream; more [network] keys may be appended.
func dnsConfig() string {
	return "version = 1\n[network]\ndns = [\"" + testhost.UpstreamAddr + "\"]\n"
}

// plainControl proves a target reachable from a plain pasta container.
func plainControl(t *testing.T, base string, probeArgs ...string) {
	t.Helper()
	r := testhost.Podman(t, append([]string{"run", "--rm", "--network=pasta", base, "/usr/local/bin/probe"}, probeArgs...)...)
	if r.Code != 0 {
		t.Fatalf("control: %v not reachable from a plain container: %s", probeArgs, r)
	}
}

func TestNetNone(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, dnsConfig())
	up := testhost.UpstreamAddr
	plainControl(t, base, "tcp", up+":80")
	r := a.run(t, "run", "--net", "none", "--harness", "shell", "--", "sh", "-c",
		"probe tcp "+up+":80; echo tcp=$?; probe loopback; echo loopback=$?; grep -c : /proc/net/dev")
	if r.Code != 0 || !strings.Contains(r.Stdout, "tcp=1") || !strings.Contains(r.Stdout, "loopback=0") {
		t.Errorf("--net none: %s", r)
	}
	// /proc/net/dev: a header line with a colon-free layout, then lo only.
	if !strings.HasSuffix(strings.TrimSpace(r.Stdout), "\n1") {
		t.Errorf("--net none has interfaces besides lo: %s", r.Stdout)
	}
}

func TestNoGate(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, dnsConfig())
	up := testhost.UpstreamAddr
	plainControl(t, base, "tcp", up+":22")
	plainControl(t, base, "tcp", up+":8080")
	r := a.run(t, "run", "--net", "no-gate", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c",
		"probe http http://allowed.test/; echo http=$?; probe http https://allowed.test/; echo https=$?; "+
			"probe tcp "+up+":22; echo ssh=$?; probe tcp "+up+":8080; echo alt=$?; "+
			"probe dns "+up+" allowed.test; echo dns=$?; probe http http://another.test/; echo other=$?; env | grep -ci proxy")
	for _, want := range []string{"http=0", "https=0", "ssh=1", "alt=1", "dns=1", "other=1", "\n0\n"} {
		if !strings.Contains(r.Stdout+"\n", want) {
			t.Errorf("no-gate: want %q in\n%s", strings.TrimSpace(want), r)
		}
	}
	// A listed IPv4 network: its addresses on 80 and 443, nothing else.
	r = a.run(t, "run", "--net", "no-gate", "--allow", "198.51.100.8/29", "--harness", "shell", "--", "sh", "-c",
		"probe http http://"+up+"/; echo http=$?; probe tcp "+up+":22; echo ssh=$?")
	if !strings.Contains(r.Stdout, "http=0") || !strings.Contains(r.Stdout, "ssh=1") {
		t.Errorf("no-gate with a network: %s", r)
	}
	// A network holding the host's own address, or internal, is refused.
	for _, n := range []string{"198.51.100.0/24", "10.255.77.0/24"} {
		if r := a.run(t, "run", "--net", "no-gate", "--allow", n, "--harness", "shell", "--", "true"); r.Code == 0 || !strings.Contains(r.Stderr, "never admitted") {
			t.Errorf("no-gate with %s: %s", n, r)
		}
	}
	// A listed name that resolves only to an internal address is never pinned.
	plainControl(t, base, "tcp", testhost.Internal["private"]+":80")
	r = a.run(t, "run", "--net", "no-gate", "--allow", "private.test", "--harness", "shell", "--", "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, "no address that may be admitted") {
		t.Errorf("no-gate with an internal-only name: %s", r)
	}
}

func TestNetOpen(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), "")
	r := a.run(t, "run", "--net", "open", "--harness", "shell", "--", "probe", "tcp", testhost.UpstreamAddr+":22")
	if r.Code != 0 || !strings.Contains(r.Stderr, "WARNING: network mode open") {
		t.Errorf("--net open: %s", r)
	}
}

// TestExplicitEnvironment: only named variables enter, their values never
// appear in any process's arguments, and a named but unset one is an error.
func TestExplicitEnvironment(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), "")
	secret := "s3cr3t-" + time.Now().Format("150405.000000")
	writeUserFile(t, filepath.Join(a.project, "env.sh"), "printenv SECRET_TOKEN; printenv FOO; printenv HOME; printenv OTHER_SECRET || echo no-other; sleep 3\n")
	found := make(chan string, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		found <- findInCmdlines(secret)
	}()
	r := a.runEnv(t, []string{"SECRET_TOKEN=" + secret, "OTHER_SECRET=leak"},
		"run", "--harness", "shell", "--env", "SECRET_TOKEN", "--env", "FOO=bar", "--", "sh", "/project/env.sh")
	if r.Code != 0 || r.Stdout != secret+"\nbar\n/home/agent\nno-other\n" {
		t.Errorf("environment in the sandbox: %s", r)
	}
	if where := <-found; where != "" {
		t.Errorf("the secret value appears in a command line: %s", where)
	}
	r = a.run(t, "run", "--harness", "shell", "--env", "NOT_SET_ANYWHERE", "--", "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, "NOT_SET_ANYWHERE is to be passed but is not set") {
		t.Errorf("unset --env: %s", r)
	}
}

func findInCmdlines(s string) string {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			return e.Name() + ": " + strings.ReplaceAll(string(b), "\x00", " ")
		}
	}
	return ""
}

// TestLimits: on this host Podman would ignore cgroup limits; aisb refuses
// them, and the rlimit fallback really bounds processes and memory.
func TestLimits(t *testing.T) {
	// Sequential: nproc counts every process of the test user on the host,
	// other tests' sessions too (docs/networking.md, resource exhaustion).
	a := newAisb(t, testBaseImage(t), "")
	r := a.run(t, "run", "--harness", "shell", "--pids", "64", "--", "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, "cannot be enforced") || !strings.Contains(r.Stderr, "--rlimit-fallback") {
		t.Errorf("--pids without the fallback on a cgroup v1 rootless host: %s", r)
	}
	// Controls: without limits, 100 processes and 128 MiB are fine.
	if r := a.run(t, "run", "--harness", "shell", "--", "sh", "-c", "probe nproc 100 && probe alloc 128"); r.Code != 0 {
		t.Fatalf("control: %s", r)
	}
	r = a.run(t, "run", "--harness", "shell", "--rlimit-fallback", "--pids", "64", "--", "probe", "nproc", "100")
	if r.Code == 0 || !strings.Contains(r.Stdout, "started") {
		t.Errorf("--pids 64 with the fallback let 100 processes start: %s", r)
	}
	r = a.run(t, "run", "--harness", "shell", "--rlimit-fallback", "--memory", "64m", "--", "probe", "alloc", "128")
	if r.Code == 0 {
		t.Errorf("--memory 64m with the fallback let 128 MiB be mapped: %s", r)
	}
	r = a.run(t, "run", "--harness", "shell", "--rlimit-fallback", "--cpu-seconds", "1", "--", "sh", "-c", "ulimit -t")
	if strings.TrimSpace(r.Stdout) != "1" {
		t.Errorf("--cpu-seconds 1: ulimit -t says %s", r)
	}
	r = a.run(t, "run", "--harness", "shell", "--rlimit-fallback", "--cpus", "1", "--", "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, "--cpus cannot be enforced with the rlimit fallback") {
		t.Errorf("--cpus with the fallback: %s", r)
	}
}

// TestExitStatus: the command's exit status is aisb's, in each network
// mode; also when the command closes its output and runs on (aisb takes the
// attach's end for the exit, and checks: sandbox/box.go).
func TestExitStatus(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), dnsConfig())
	for _, mode := range []string{"none", "allow"} {
		if r := a.run(t, "run", "--net", mode, "--harness", "shell", "--", "sh", "-c", "exit 3"); r.Code != 3 {
			t.Errorf("--net %s: exit status %d, want 3", mode, r.Code)
		}
		start := time.Now()
		r := a.run(t, "run", "--net", mode, "--harness", "shell", "--", "sh", "-c", "echo closing; exec >&- 2>&- </dev/null; sleep 1; exit 4")
		if r.Code != 4 || !strings.Contains(r.Stdout, "closing") || time.Since(start) < time.Second {
			t.Errorf("--net %s: a command that closed its output and ran on for 1 s: %s (after %s)", mode, r, time.Since(start))
		}
	}
	if r := a.run(t, "run", "--harness", "shell", "--", "no-such-command"); r.Code != 127 || !strings.Contains(r.Stderr, "exec no-such-command") {
		t.Errorf("missing command: %s", r)
	}
}

// TestRestrictiveUmask: a user whose umask is 077 gets a working sandbox
// and a passing doctor: the session policy aisb writes is readable by the
// sandbox's root (a subordinate uid without CAP_DAC_OVERRIDE) whatever the
// umask. Before, every such session ended 78 with "permission denied" on
// the policy, and doctor failed its gate config and control checks. (The
// image's build context, whose modes the image keeps, is the image
// package's TestContextModesIgnoreUmask.)
func TestRestrictiveUmask(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), dnsConfig())
	run := func(args ...string) testhost.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		argv := a.command(t, ctx, args...)
		cmd := testhost.UserCommand(ctx, append([]string{"sh", "-c", `umask 077 && echo "umask $(umask)" >&2 && exec "$@"`, "sh"}, argv...)...)
		cmd.Dir = a.project
		r := testhost.Run(t, cmd)
		if !strings.Contains(r.Stderr, "umask 0077") {
			t.Fatalf("control: the umask was not 077: %s", r)
		}
		return r
	}
	for _, mode := range []string{"none", "allow"} {
		if r := run("run", "--net", mode, "--harness", "shell", "--", "sh", "-c", "echo ran"); r.Code != 0 || !strings.Contains(r.Stdout, "ran") {
			t.Errorf("--net %s with umask 077: %s", mode, r)
		}
	}
	// aisb doctor's own probes (its squid.conf, its probe script, its
	// policy) are read inside containers by other uids too.
	if r := run("doctor"); r.Code != 0 {
		t.Errorf("aisb doctor with umask 077: %s", r)
	}
}

// TestProjectFileNarrowsUntilTrusted: a repository's .aisb.toml cannot add a
// host to the sandbox's reach until the user trusts its exact content.
func TestProjectFileNarrowsUntilTrusted(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), dnsConfig()+"allowed_hosts = [\"allowed.test\"]\n")
	project := "version = 1\n[network]\nallowed_hosts = [\"allowed.test\", \"another.test\"]\n"
	writeUserFile(t, filepath.Join(a.project, ".aisb.toml"), project)
	probe := "probe http-proxy \"$HTTP_PROXY\" http://another.test/; echo other=$?; probe http-proxy \"$HTTP_PROXY\" http://allowed.test/; echo allowed=$?"
	r := a.run(t, "run", "--harness", "shell", "--", "sh", "-c", probe)
	if !strings.Contains(r.Stderr, `"another.test" ignored`) || !strings.Contains(r.Stdout, "other=1") || !strings.Contains(r.Stdout, "allowed=0") {
		t.Errorf("untrusted project file: %s", r)
	}
	// The hash of the content reviewed: without a terminal, trust needs it.
	sum := sha256.Sum256([]byte(project))
	if r := a.run(t, "trust", "--sha256", hex.EncodeToString(sum[:])); r.Code != 0 {
		t.Fatalf("trust: %s", r)
	}
	r = a.run(t, "run", "--harness", "shell", "--", "sh", "-c", probe)
	if strings.Contains(r.Stderr, "ignored") || !strings.Contains(r.Stdout, "other=0") {
		t.Errorf("trusted project file: %s", r)
	}
}
