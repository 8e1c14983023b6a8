package tests

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestRefuseHomeAsProject: run from the home directory, aisb refuses to
// mount it (the agent would rewrite aisb's own configuration and the user's
// shell startup files); -C names the project without cd.
func TestRefuseHomeAsProject(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), "")
	home := testhost.UserDir(t)
	conf := filepath.Join(home, ".config", "aisb", "config.toml")
	writeUserFile(t, conf, "version = 1\n")
	writeUserFile(t, filepath.Join(home, ".config", "placeholder"), "") // ~/.config owned by the user
	writeUserFile(t, filepath.Join(a.project, "marker"), "the project\n")
	asUser := func(dir string, args ...string) testhost.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		argv := append([]string{"env", "HOME=" + home, "CONTAINER_HOST=" + testhost.Service(t), "AISB_BASE_IMAGE=" + a.base, a.bin}, args...)
		cmd := testhost.UserCommand(ctx, argv...)
		cmd.Dir = dir
		return testhost.Run(t, cmd)
	}
	// Control: the same command in an ordinary project runs and writes.
	r := asUser(a.project, "run", "--harness", "shell", "--", "sh", "-c", "echo x >> /project/written")
	if r.Code != 0 {
		t.Fatalf("control: the command does not run in an ordinary project: %s", r)
	}
	r = asUser(home, "run", "--harness", "shell", "--", "sh", "-c", "echo x >> /project/.config/aisb/config.toml")
	if b, _ := os.ReadFile(conf); string(b) != "version = 1\n" {
		t.Errorf("the agent rewrote the user's config.toml from a session run in the home directory: %q", b)
	}
	if r.Code == 0 || !strings.Contains(r.Stderr, home) || !strings.Contains(r.Stderr, "home") || !strings.Contains(r.Stderr, "-C") {
		t.Errorf("run in the home directory: want a refusal naming %s and -C DIR: %s", home, r)
	}
	// The parent of the home directory, and a directory holding aisb's
	// configuration, are refused too.
	for _, dir := range []string{filepath.Dir(home), filepath.Join(home, ".config")} {
		if r := asUser(dir, "run", "--harness", "shell", "--", "true"); r.Code == 0 || !strings.Contains(r.Stderr, dir) {
			t.Errorf("run in %s: want a refusal: %s", dir, r)
		}
	}
	// A symlink to the home directory is the home directory.
	link := filepath.Join(a.project, "home-link")
	os.Symlink(home, link)
	if r := asUser(a.project, "run", "-C", link, "--harness", "shell", "--", "true"); r.Code == 0 || !strings.Contains(r.Stderr, "home") {
		t.Errorf("run -C a symlink to home: want a refusal: %s", r)
	}
	// -C names the project from anywhere.
	r = asUser(home, "run", "-C", a.project, "--harness", "shell", "--", "cat", "/project/marker")
	if r.Code != 0 || !strings.Contains(r.Stdout, "the project") {
		t.Errorf("run -C %s: %s", a.project, r)
	}
}

// TestTrustRace reproduces the trust race with a real session: the agent
// watches .aisb.toml with inotify and swaps a widening file in the moment
// the user has read it. The swapped content must never be trusted, and the
// next session must not reach the host it names.
func TestTrustRace(t *testing.T) {
	base := testBaseImage(t)
	a := newAisb(t, base, dnsConfig()+"allowed_hosts = [\"allowed.test\"]\n")
	harmless := "version = 1\n[network]\nallowed_hosts = [\"allowed.test\"]\n"
	widening := "version = 1\n[network]\nallowed_hosts = [\"allowed.test\", \"unnamed.test\"]\n"
	writeUserFile(t, filepath.Join(a.project, ".aisb.toml"), harmless)
	writeUserFile(t, filepath.Join(a.project, ".b"), widening)

	// Control: unnamed.test is reachable through a gate that lists it.
	r := a.run(t, "run", "--allow", "unnamed.test", "--harness", "shell", "--", "sh", "-c", "probe http-proxy $HTTP_PROXY http://unnamed.test/")
	if r.Code != 0 || !strings.Contains(r.Stdout, "status 200") {
		t.Fatalf("control: unnamed.test not reachable when allowed: %s", r)
	}

	// The agent's session, running while the user reviews and trusts.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	agent := testhost.UserCommand(ctx, a.command(t, ctx, "run", "--harness", "shell", "--", "sh", "-c",
		"probe swap-on-read /project/.aisb.toml /project/.b; while [ ! -e /project/.stop ]; do sleep 0.2; done")...)
	agent.Dir = a.project
	out, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	agent.Stderr = os.Stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	stopAgent := func() {
		writeUserFile(t, filepath.Join(a.project, ".stop"), "")
		agent.Wait()
	}
	defer stopAgent()
	lines := bufio.NewScanner(out)
	waitLine := func(want string) {
		t.Helper()
		for lines.Scan() {
			if strings.Contains(lines.Text(), want) {
				return
			}
		}
		t.Fatalf("the agent never printed %q", want)
	}
	waitLine("watching")
	// The user reads the file: it is the harmless one.
	seen := userCat(t, filepath.Join(a.project, ".aisb.toml"))
	if seen != harmless {
		t.Fatalf("the user saw %q", seen)
	}
	waitLine("swapped")
	// ...and trusts it, as aisb trust's own help used to say: cat, then trust.
	r = a.run(t, "trust")
	t.Logf("aisb trust while the agent runs: %s", r)
	stopAgent()

	// With the agent gone, trust on a terminal shows what it would record:
	// the user, who reviewed the harmless file, sees the other one and says no.
	env := []string{"TERM=xterm", "XDG_CONFIG_HOME=" + a.config, "XDG_STATE_HOME=" + a.state, "CONTAINER_HOST=" + testhost.Service(t)}
	tm := testhost.NewTerminal(t, a.project, env, a.bin+" trust")
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		s := tm.Screen()
		if strings.Contains(s, "[y/N]") {
			if !strings.Contains(s, "unnamed.test") {
				t.Errorf("trust asks without showing the content it would record:\n%s", s)
			}
			tm.Keys("n", "Enter")
			break
		}
		if strings.Contains(s, "EXIT=") || time.Now().After(end) {
			t.Errorf("trust on a terminal did not ask before trusting:\n%s", s)
			break
		}
	}
	tm.WaitFor("EXIT=", 30*time.Second)

	// Whatever happened, the next session must not reach unnamed.test.
	r = a.run(t, "run", "--harness", "shell", "--", "sh", "-c", "probe http-proxy $HTTP_PROXY http://unnamed.test/")
	if strings.Contains(r.Stdout, "status 200") {
		t.Errorf("the swapped .aisb.toml was trusted: the next session reached unnamed.test: %s", r)
	}
	if !strings.Contains(r.Stdout, "403") {
		t.Errorf("the next session's request was not refused by the gate: %s", r)
	}
}

// userCat reads a file as the test user, as a user reviewing it would.
func userCat(t *testing.T, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := testhost.UserCommand(ctx, "cat", path).Output()
	if err != nil {
		t.Fatalf("cat %s: %v", path, err)
	}
	return string(b)
}

// TestLongLivedGateState: what squid can write (its own directory) is never
// read back as truth. A squid.conf rewritten there does not move the port
// sessions are let through to, a follower.pid written there does not make
// gate down kill another process, and --gate says what it does not apply.
func TestLongLivedGateState(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), dnsConfig())
	if r := a.run(t, "gate", "up", "--allow", "allowed.test", "shared"); r.Code != 0 {
		t.Fatalf("gate up: %s", r)
	}
	t.Cleanup(func() { a.run(t, "gate", "down", "shared") })
	gdir := filepath.Join(a.state, "aisb", "gates", "shared")
	writeUserFile(t, filepath.Join(a.project, ".aisb.toml"), "version = 1\n[network]\nallowed_hosts = [\"allowed.test\"]\n")

	// A host-loopback service the sandbox must never reach.
	secret := listenLoopback(t, "host-secret")
	conf := filepath.Join(gdir, "squid.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatalf("the gate's squid.conf: %v", err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "http_port ") {
			l = "http_port 127.0.0.1:" + itoa(secret)
		}
		lines = append(lines, l)
	}
	// squid runs as the user through keep-id: it can write this file.
	writeUserFile(t, conf, strings.Join(lines, "\n"))
	// The gate's address as the sandbox reaches it (HTTP_PROXY is
	// http://USER:TOKEN@ADDRESS:PORT); the control: the same probe to the
	// gate's own port connects, so the address is right and a refusal of
	// the secret's port is the table's.
	probe := `h=${HTTP_PROXY##*@}; addr=${h%:*}; probe tcp $addr:${h##*:}; echo gatetcp=$?; probe tcp $addr:` + itoa(secret)
	r := a.run(t, "run", "--gate", "shared", "--allow", "unnamed.test", "--harness", "shell", "--", "sh", "-c",
		probe+"; echo secret=$?; probe http-proxy $HTTP_PROXY http://allowed.test/; echo gate=$?")
	if !strings.Contains(r.Stdout, "gatetcp=0") {
		t.Errorf("control: the probe does not reach the gate's own port at the address it tries the secret's on: %s", r)
	}
	if !strings.Contains(r.Stdout, "secret=1") || strings.Contains(r.Stdout, "host-secret") {
		t.Errorf("a squid.conf rewritten in the gate's directory opened another host port to the sandbox (or the probe did not try it): %s", r)
	}
	if !strings.Contains(r.Stdout, "gate=0") {
		t.Errorf("the session did not reach its long-lived gate: %s", r)
	}
	if !strings.Contains(r.Stderr, "--allow") || !strings.Contains(r.Stderr, "network.allowed_hosts") || !strings.Contains(r.Stderr, "not applied") {
		t.Errorf("--gate did not say what it does not apply: %s", r.Stderr)
	}

	// A process of the user's that gate down must leave alone.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	victim := testhost.UserCommand(ctx, "sleep", "300")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { victim.Wait(); close(done) }()
	time.Sleep(300 * time.Millisecond)
	sleepPid := findChild(t, victim.Process.Pid, "sleep")
	writeUserFile(t, filepath.Join(gdir, "follower.pid"), itoa(sleepPid))
	if r := a.run(t, "gate", "down", "shared"); r.Code != 0 {
		t.Errorf("gate down: %s", r)
	}
	select {
	case <-done:
		t.Errorf("gate down killed pid %d, named by a follower.pid in the gate's directory", sleepPid)
	case <-time.After(time.Second):
	}
	// Writes there refuse symlinks: a squid.conf planted as a link is not
	// followed by the next gate up.
	target := filepath.Join(testhost.UserDir(t), "bashrc")
	writeUserFile(t, target, "# the user's file\n")
	os.Remove(conf)
	os.Symlink(target, conf)
	r = a.run(t, "gate", "up", "shared")
	if b, _ := os.ReadFile(target); string(b) != "# the user's file\n" {
		t.Errorf("gate up wrote through a symlink in the gate's directory: %q (%s)", b, r)
	}
}

// findChild returns the pid of the first process named name under pid.
func findChild(t *testing.T, pid int, name string) int {
	t.Helper()
	out, _ := exec.Command("pgrep", "-P", itoa(pid)).Output()
	for _, f := range strings.Fields(string(out)) {
		var p int
		for _, c := range f {
			p = p*10 + int(c-'0')
		}
		comm, _ := os.ReadFile("/proc/" + f + "/comm")
		if strings.TrimSpace(string(comm)) == name {
			return p
		}
		if q := findChild(t, p, name); q != 0 {
			return q
		}
	}
	return 0
}

// TestAuditCapped: a session's audit stops growing at its cap, and says so
// in an event, however many requests the agent makes.
func TestAuditCapped(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), dnsConfig()+"[logs]\nsession_max = \"8k\"\n")
	r := a.run(t, "run", "--harness", "shell", "--", "sh", "-c",
		"for i in $(seq 1500); do probe http-proxy $HTTP_PROXY http://unnamed.test/$i >/dev/null; done; echo done")
	if r.Code != 0 || !strings.Contains(r.Stdout, "done") {
		t.Fatalf("run: %s", r)
	}
	files, _ := filepath.Glob(filepath.Join(a.state, "aisb", "audit", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("audit files: %v", files)
	}
	fi, _ := os.Stat(files[0])
	if fi.Size() > 8<<10+1024 {
		t.Errorf("the audit grew to %d bytes past its 8k cap", fi.Size())
	}
	var capped, blocked int
	for _, e := range a.events(t) {
		switch e.Event {
		case "audit_capped":
			capped++
		case "network_blocked":
			blocked++
		}
	}
	if capped != 1 || blocked < 10 {
		t.Errorf("want some blocked events and one audit_capped event, have %d blocked, %d capped", blocked, capped)
	}
	// The gate's own access log takes no more disk than the part not yet
	// converted (its converted part is punched out).
	logs, _ := filepath.Glob(filepath.Join(a.state, "aisb", "sessions", "*", "gate", "access.log"))
	if len(logs) != 1 {
		t.Fatalf("access logs: %v", logs)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(logs[0], &st); err != nil {
		t.Fatal(err)
	}
	if st.Size < 64<<10 {
		t.Fatalf("control: the access log is only %d bytes; make more requests", st.Size)
	}
	if used := st.Blocks * 512; used > st.Size/2 {
		t.Errorf("the access log of %d bytes takes %d bytes of disk", st.Size, used)
	}
}
