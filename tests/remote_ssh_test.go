package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// sshProbePrefix begins the names of tests/sshengine's containers.
const sshProbePrefix = "aisb-sshtest-"

// sshProbe is what tests/sshengine -do probe prints.
type sshProbe struct {
	Version, Why, Hostname, Interfaces string
	Local, Created, Removed            bool
}

// TestRemoteSSHEngine (issue #29, 4b): the engine user's rootless Podman
// service, on a host of its own (tests/host/engine-ssh.sh: sshd and the
// service in the namespace aisb-eng, as AISB_ENGINE_SSH_USER), reached by the caller as
// CONTAINER_HOST=ssh://ENGINE@198.51.100.42/run/user/UID/podman/podman.sock
// through engine.Connect with a key the test writes: the API answers, a
// container runs there (in that namespace's network) and a created one is
// removed, and Connect still calls it not local. Refused: a key the host
// does not know, a host key known_hosts does not hold (and known_hosts is
// not written: no trust on first use), a host key other than the pinned
// one. (aisb's commands on it, doctor, image, state and gate included, are
// remoteCommandChecks's, run for a unix:// engine by TestRemoteEngineRefused;
// Connect's refusal of ssh:// before it dials, for a command that needs a
// local engine, is TestConnectRefusesBeforeAnyCall's.) Controls: the
// caller cannot reach the service's socket on the filesystem (so only SSH
// gets there), the two users read none of each other's files, and the
// engine host reaches the test upstream.
func TestRemoteSSHEngine(t *testing.T) {
	parallel(t)
	testhost.Require(t)
	// TestRemoteRunSSH's sessions are that user's sshd logins too.
	lockEngine(t, sshEngineUser)
	began := time.Now()
	engineUser := sshEngineUser
	eu, err := user.Lookup(engineUser)
	if err != nil {
		testhost.Skip(t, "engine user %s missing (run tests/host/setup.sh): %v", engineUser, err)
	}
	caller, err := user.Lookup(testhost.User)
	if err != nil {
		t.Fatal(err)
	}
	hostKey := testhost.EngineHostKey(t)
	sock := "/run/user/" + eu.Uid + "/podman/podman.sock"
	uri := fmt.Sprintf("ssh://%s@%s%s", engineUser, testhost.EngineSSHAddr, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The engine host is up: its service answers its user, in its namespace, and
	// the host reaches the test upstream (remote.test's address).
	if r := testhost.Run(t, asEngine(ctx, eu, "curl", "-sS", "--max-time", "10", "--unix-socket", sock, "http://d/_ping")); strings.TrimSpace(r.Stdout) != "OK" {
		testhost.Skip(t, "%s's service on the engine host does not answer (AISB_ENGINE_SSH_USER=%s tests/host/engine-ssh.sh up): %s", engineUser, engineUser, r)
	}
	if r := testhost.Run(t, exec.CommandContext(ctx, "ip", "netns", "exec", testhost.EngineNS, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
		"--max-time", "10", "--resolve", "remote.test:80:"+testhost.UpstreamAddr, "http://remote.test/")); r.Stdout != "200" {
		t.Errorf("control: the engine host does not reach the upstream: %s", r)
	}
	// Controls: only SSH reaches the service; neither user reads the other's files.
	if r := testhost.Run(t, testhost.UserCommand(ctx, "curl", "-sS", "--max-time", "10", "--unix-socket", sock, "http://d/_ping")); r.Code == 0 {
		t.Fatalf("%s reaches %s's socket %s without SSH: %s", testhost.User, engineUser, sock, r)
	}
	dir := testhost.UserDir(t)
	os.Chmod(dir, 0o700)
	if r := testhost.Run(t, asEngine(ctx, eu, "ls", dir)); r.Code == 0 {
		t.Errorf("%s reads the caller's directory %s: %s", engineUser, dir, r)
	}
	if r := testhost.Run(t, testhost.UserCommand(ctx, "ls", eu.HomeDir)); r.Code == 0 {
		t.Errorf("%s reads %s's home %s: %s", testhost.User, engineUser, eu.HomeDir, r)
	}

	t.Logf("%v: controls done", time.Since(began).Round(time.Millisecond))
	// The caller's key, authorized for the engine user; a second one not.
	for _, k := range []string{"id", "other"} {
		if r := testhost.Run(t, testhost.UserCommand(ctx, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "aisb-test-"+k, "-f", filepath.Join(dir, k))); r.Code != 0 {
			t.Fatalf("ssh-keygen: %s", r)
		}
	}
	pub, err := os.ReadFile(filepath.Join(dir, "id.pub"))
	if err != nil {
		t.Fatal(err)
	}
	testhost.AuthorizeEngineKey(t, engineUser, string(pub))
	known := filepath.Join(dir, "known_hosts")
	writeUserFile(t, known, testhost.EngineSSHAddr+" "+hostKey+"\n")
	// Another host's key (the git test server's) and a key in place of this one.
	gitKey := testhost.SSHHostKey(t)
	unknown := filepath.Join(dir, "unknown_hosts")
	writeUserFile(t, unknown, testhost.SSHAddr+" "+gitKey+"\n")
	changed := filepath.Join(dir, "changed_hosts")
	writeUserFile(t, changed, testhost.EngineSSHAddr+" "+gitKey+"\n")

	bin := testhost.Binary(t, "tests/sshengine")
	probe := func(key, knownHosts string) testhost.Result {
		start := time.Now()
		r := testhost.Run(t, testhost.UserCommand(ctx, "CONTAINER_SSHKEY="+filepath.Join(dir, key), "AISB_SSH_KNOWN_HOSTS="+knownHosts,
			bin, "-uri", uri, "-runtime-dir", "/run/user/"+caller.Uid, "-image", testhost.BaseImage))
		t.Logf("probe with key %s, known_hosts %s: exit %d in %v %s", key, filepath.Base(knownHosts), r.Code, time.Since(start).Round(time.Millisecond), r.Stderr)
		return r
	}
	leftovers := func() string {
		r := testhost.Run(t, asEngine(ctx, eu, "podman", "ps", "-a", "--format", "{{.Names}}", "--filter", "name=^"+sshProbePrefix))
		if r.Code != 0 {
			t.Fatalf("podman ps as %s: %s", engineUser, r)
		}
		return strings.TrimSpace(r.Stdout)
	}

	r := probe("id", known)
	if r.Code != 0 {
		t.Fatalf("engine.Connect over ssh:// with the authorized key: %s", r)
	}
	var p sshProbe
	if err := json.Unmarshal([]byte(r.Stdout), &p); err != nil {
		t.Fatalf("probe output: %v: %s", err, r)
	}
	t.Logf("over ssh: %+v", p)
	if p.Local || !strings.Contains(p.Why, "ssh:// scheme") {
		t.Errorf("an ssh:// engine decided local (%v): %s", p.Local, p.Why)
	}
	// A --network=host container there sees the engine host's interfaces
	// (aisb-eng's eth0 and up0), not this namespace's.
	ifs := strings.Fields(p.Interfaces)
	if !slices.Contains(ifs, "up0") || slices.Contains(ifs, "aisb-eng0") || slices.Contains(ifs, "aisb-up0") {
		t.Errorf("the container's host network is not the engine host's: %q", ifs)
	}
	if !p.Created || !p.Removed {
		t.Errorf("create and remove through ssh: created %v, removed %v", p.Created, p.Removed)
	}
	// The tunnel's socket went with Close, on the caller's side.
	if left, _ := filepath.Glob("/run/user/" + caller.Uid + "/aisb/ssh-*"); len(left) != 0 {
		t.Errorf("the closed connection left its tunnel's directory: %q", left)
	}
	if left := leftovers(); left != "" {
		t.Errorf("the probe left containers on %s's engine: %s", engineUser, left)
	}

	t.Logf("%v: first probe done", time.Since(began).Round(time.Millisecond))
	// SIGKILL of a connected process: its tunnel's directory stays behind
	// until the next ssh:// Connect of the user, which sweeps it, and the
	// engine host's sshd ends that login.
	sessionsBefore := sshdSessions(t, eu)
	hold := testhost.UserCommand(ctx, "CONTAINER_SSHKEY="+filepath.Join(dir, "id"), "AISB_SSH_KNOWN_HOSTS="+known,
		bin, "-do", "hold", "-uri", uri, "-runtime-dir", "/run/user/"+caller.Uid)
	hold.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // runuser's child too
	out, err := hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 10)
	if n, _ := io.ReadFull(out, line); string(line[:n]) != "connected\n" {
		syscall.Kill(-hold.Process.Pid, syscall.SIGKILL)
		t.Fatalf("hold: %q", line[:n])
	}
	if n := sshdSessions(t, eu); n <= sessionsBefore {
		t.Errorf("control: no sshd session of %s while connected (%d, %d before)", engineUser, n, sessionsBefore)
	}
	syscall.Kill(-hold.Process.Pid, syscall.SIGKILL)
	hold.Wait()
	if left, _ := filepath.Glob("/run/user/" + caller.Uid + "/aisb/ssh-*"); len(left) != 1 {
		t.Errorf("control: the killed process's tunnel directory: %q, want one", left)
	}
	if err := testhost.WaitFor(30*time.Second, func() error {
		if n := sshdSessions(t, eu); n > sessionsBefore {
			return fmt.Errorf("%d sshd sessions of %s, %d before", n, engineUser, sessionsBefore)
		}
		return nil
	}); err != nil {
		t.Errorf("the engine host kept the killed process's login: %v", err)
	}

	t.Logf("%v: SIGKILL part done", time.Since(began).Round(time.Millisecond))
	// Refused: a key the engine host does not let in,
	if r := probe("other", known); r.Code != 3 || !strings.Contains(r.Stderr, "unable to authenticate") || !strings.Contains(r.Stderr, "CONTAINER_SSHKEY") {
		t.Errorf("a key the engine host does not know was not refused as such: %s", r)
	}
	// a host key the known_hosts file lacks, which aisb does not add,
	fp := strings.TrimSpace(testhost.Run(t, exec.CommandContext(ctx, "ssh-keygen", "-l", "-E", "sha256", "-f", filepath.Join(testhost.EngineSSHDir, "host_ed25519.pub"))).Stdout)
	if f := strings.Fields(fp); len(f) > 1 {
		fp = f[1]
	}
	if r := probe("id", unknown); r.Code != 3 || !strings.Contains(r.Stderr, "is in none of "+unknown) || !strings.Contains(r.Stderr, fp) {
		t.Errorf("an unknown host key (%s) was not refused with its fingerprint: %s", fp, r)
	}
	if b, _ := os.ReadFile(unknown); string(b) != testhost.SSHAddr+" "+gitKey+"\n" {
		t.Errorf("the refused connection wrote to known_hosts: %q", b)
	}
	// and a host key other than the one pinned.
	if r := probe("id", changed); r.Code != 3 || !strings.Contains(r.Stderr, "is not the one "+changed+" pin") {
		t.Errorf("a changed host key was not refused as one: %s", r)
	}
	if r := probe("id", known); r.Code != 0 {
		t.Errorf("engine.Connect over ssh:// after the refusals: %s", r)
	}
	if left, _ := filepath.Glob("/run/user/" + caller.Uid + "/aisb/ssh-*"); len(left) != 0 {
		t.Errorf("the next Connect left the killed process's tunnel directory: %q", left)
	}

	t.Logf("%v: refusals done", time.Since(began).Round(time.Millisecond))
	t.Logf("the test's own work (after the shared base image): %v", time.Since(began).Round(time.Millisecond))
}

// sshdSessions counts the engine host's sshd processes running as eu (a
// login's own).
func sshdSessions(t *testing.T, eu *user.User) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/status")
	n := 0
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		st := string(b)
		name, _, _ := strings.Cut(strings.TrimPrefix(st, "Name:\t"), "\n")
		if !strings.HasPrefix(name, "sshd") {
			continue
		}
		for _, l := range strings.Split(st, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" && f[1] == eu.Uid {
				n++
			}
		}
	}
	return n
}
