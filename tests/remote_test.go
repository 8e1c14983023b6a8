package tests

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// engineUser is the user whose rootless Podman stands for an engine that
// is not aisb's own (tests/host/setup.sh's engine_user); engineSockets is
// where its services' sockets go, a directory others may enter, not list.
var engineUser = cmp.Or(os.Getenv("AISB_ENGINE_USER"), "aisbengine")

// AISB_ENGINE_SOCKETS names another directory (a helper's own engine user).
var engineSockets = cmp.Or(os.Getenv("AISB_ENGINE_SOCKETS"), "/run/aisb-engine")

// sshEngineUser is the remote engine host's user (tests/host/engine-ssh.sh,
// AISB_ENGINE_SSH_USER): another engine user, with a storage of its own, so
// the ssh:// tests need not wait for the unix:// ones (lockEngine).
var sshEngineUser = cmp.Or(os.Getenv("AISB_ENGINE_SSH_USER"), "aisbengine2")

// TestRemoteEngineRefused (issue #29): on a Podman that is not aisb's own
// local one — here another user's rootless service, reached as
// CONTAINER_HOST=unix://… — doctor, image, state and gate (up, down,
// status, and run --gate) check and change that engine through its API
// alone, and leave nothing there they did not mean to (remoteCommandChecks,
// which the ssh:// engine can run too); a same-user forwarder to it is
// judged not local too. Controls: the engine really
// answers the caller (a plain API ping through the same socket, and
// through the forwarder), neither user reads the other's files, and the
// same commands through the caller's own service, also spelled unix://…,
// take the local path.
func TestRemoteEngineRefused(t *testing.T) {
	parallel(t)
	// Before anything acts as the engine's user (AISB_INTEGRATION=0 stops here).
	testhost.Require(t)
	lockEngine(t, engineUser)
	began := time.Now()
	defer func() {
		t.Logf("the test's own work: %v", time.Since(began).Round(time.Millisecond))
	}()
	eu, err := user.Lookup(engineUser)
	if err != nil {
		testhost.Skip(t, "engine user %s missing (run tests/host/setup.sh): %v", engineUser, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	base := engineBaseImage(t, eu, asEngine)
	start := time.Now()
	sock := startEngineService(t, eu)
	t.Logf("%s's service up in %v", engineUser, time.Since(start).Round(time.Millisecond))

	// Control 2: the other user's service answers the caller.
	ping := testhost.Run(t, testhost.UserCommand(ctx, "curl", "-sS", "--max-time", "30", "--unix-socket", sock, "http://d/_ping"))
	if ping.Code != 0 || strings.TrimSpace(ping.Stdout) != "OK" {
		t.Fatalf("control: the engine user's service does not answer %s through %s: %s", testhost.User, sock, ping)
	}

	a := newAisb(t, base, dnsConfig())
	// The premise: neither user reads the other's files.
	if err := os.Chmod(a.project, 0o700); err != nil {
		t.Fatal(err)
	}
	if r := testhost.Run(t, asEngine(ctx, eu, "ls", a.project)); r.Code == 0 {
		t.Errorf("%s reads the caller's project %s: %s", engineUser, a.project, r)
	}
	if r := testhost.Run(t, testhost.UserCommand(ctx, "ls", eu.HomeDir)); r.Code == 0 {
		t.Errorf("%s reads %s's home %s: %s", testhost.User, engineUser, eu.HomeDir, r)
	}

	remoteCommandChecks(t, ctx, a, cmdEngine{remoteEngine{eu: eu, uri: "unix://" + sock, as: asEngine}, base})
	a.env = nil
	before := engineObjects(t, ctx, eu)

	// A forwarder of the caller's own uid on this host (as ssh -L or
	// podman machine's gvproxy would be) to that engine: not local either,
	// for what serves the socket is not Podman. Control: it does forward.
	fwd := startForwarder(t, sock)
	if ping := testhost.Run(t, testhost.UserCommand(ctx, "curl", "-sS", "--max-time", "30", "--unix-socket", fwd, "http://d/_ping")); ping.Code != 0 || strings.TrimSpace(ping.Stdout) != "OK" {
		t.Fatalf("control: the forwarder does not reach the engine: %s", ping)
	}
	a.host = "unix://" + fwd
	if r := a.runEnv(t, []string{"AISB_TRACE=1"}, "state", "ls"); r.Code != 0 || !strings.Contains(r.Stderr, "trace: engine at unix://"+fwd+" is not local") || !strings.Contains(r.Stderr, "not by Podman") {
		t.Errorf("aisb state ls through a same-user forwarder to %s's engine did not go through its API as to one not local: %s", engineUser, r)
	}
	// Nothing made on the other engine.
	if after := engineObjects(t, ctx, eu); after != before {
		t.Errorf("state ls through the forwarder left something on %s's engine:\nbefore: %s\nafter: %s", engineUser, before, after)
	}

	// Control 1: the caller's own service, spelled unix://… as well.
	a.host = a.service(t)
	if !strings.HasPrefix(a.host, "unix:///") {
		t.Fatalf("the caller's own service is %q, not a unix:// URI", a.host)
	}
	start = time.Now()
	r := a.runEnv(t, []string{"AISB_TRACE=1"}, "run", "--net", "none", "--harness", "shell", "--", "sh", "-c", "echo RAN")
	t.Logf("control: aisb run through %s's own service: exit %d in %v", testhost.User, r.Code, time.Since(start).Round(time.Millisecond))
	if r.Code != 0 || !strings.Contains(r.Stdout, "RAN") {
		t.Fatalf("control: the same run through %s's own service failed: %s", testhost.User, r)
	}
	for _, want := range []string{"trace: engine at " + a.host + " is local: its socket is served by podman",
		"engine local: the policy and the gate's directory are bind-mounted"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("control: the trace lacks %q: %s", want, r.Stderr)
		}
	}
	if r := a.runEnv(t, []string{"AISB_TRACE=1"}, "state", "ls"); r.Code != 0 || strings.Contains(r.Stderr, "is not local") {
		t.Errorf("control: aisb state ls through %s's own service: %s", testhost.User, r)
	}
	for _, l := range strings.Split(r.Stderr, "\n") {
		if strings.Contains(l, "trace: engine at") || strings.Contains(l, "connected to podman") {
			t.Logf("control: %s", l)
		}
	}
}

// engineMu keeps the tests of one engine user's Podman one at a time: one
// counts what is on it (or its sshd's logins), another makes and removes
// sessions there. Each engine user has its own: the unix:// tests' and the
// ssh:// tests' run beside each other unless one user serves both.
var (
	engineMuMu sync.Mutex
	engineMu   = map[string]*sync.Mutex{}
)

func lockEngine(t *testing.T, name string) {
	engineMuMu.Lock()
	mu := engineMu[name]
	if mu == nil {
		mu = new(sync.Mutex)
		engineMu[name] = mu
	}
	engineMuMu.Unlock()
	mu.Lock()
	t.Cleanup(mu.Unlock)
}

// startEngineService starts the engine user's rootless Podman service on a
// socket of its own in engineSockets, open to the caller (0666 in a
// directory nobody lists), stopped when t ends.
func startEngineService(t *testing.T, eu *user.User) string {
	t.Helper()
	sock := fmt.Sprintf("%s/remote-%d-%d.sock", engineSockets, os.Getpid(), time.Now().UnixNano())
	cmd := asEngine(context.Background(), eu, "podman", "system", "service", "--time=0", "unix://"+sock)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s's podman service: %v", engineUser, err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait(); os.Remove(sock) })
	if err := testhost.WaitFor(time.Minute, func() error { _, err := os.Stat(sock); return err }); err != nil {
		t.Fatalf("%s's podman service socket did not appear: %v", engineUser, err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	return sock
}

// forwarder relays each connection to its socket to another unix socket:
// a same-user, same-host stand-in for ssh -L.
const forwarder = `import socket, sys, threading
ls = socket.socket(socket.AF_UNIX)
ls.bind(sys.argv[1])
ls.listen(16)
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
while True:
    c, _ = ls.accept()
    u = socket.socket(socket.AF_UNIX)
    try:
        u.connect(sys.argv[2])
    except OSError:
        c.close()
        continue
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
`

// startForwarder runs the forwarder as the test user, from a socket of its
// own to target, stopped when t ends.
func startForwarder(t *testing.T, target string) string {
	t.Helper()
	dir := testhost.UserDir(t)
	script, sock := dir+"/forward.py", dir+"/forward.sock"
	testhost.WriteUserFile(t, script, forwarder)
	cmd := testhost.UserCommand(context.Background(), "python3", script, sock, target)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the forwarder: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	if err := testhost.WaitFor(30*time.Second, func() error { _, err := os.Stat(sock); return err }); err != nil {
		t.Fatalf("the forwarder's socket did not appear: %v", err)
	}
	return sock
}

// asEngine runs argv as the engine user with a clean rootless environment.
func asEngine(ctx context.Context, eu *user.User, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "runuser", engineArgs(eu, argv)...)
	cmd.Dir = "/"
	return cmd
}

// asEngineIn is asEngine inside the network namespace ns: on the remote
// engine host (tests/host/engine-ssh.sh), where its service runs.
func asEngineIn(ns string) func(context.Context, *user.User, ...string) *exec.Cmd {
	return func(ctx context.Context, eu *user.User, argv ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, "runuser"}, engineArgs(eu, argv)...)...)
		cmd.Dir = "/"
		return cmd
	}
}

// engineArgs are runuser's arguments for argv as eu.
func engineArgs(eu *user.User, argv []string) []string {
	env := []string{"HOME=" + eu.HomeDir, "USER=" + eu.Username, "XDG_RUNTIME_DIR=/run/user/" + eu.Uid,
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "PODMAN_IGNORE_CGROUPSV1_WARNING=1"}
	return append(append([]string{"-u", eu.Username, "--", "env", "-i"}, env...), argv...)
}

// engineObjects lists every container, volume and image on the engine
// user's Podman.
func engineObjects(t *testing.T, ctx context.Context, eu *user.User) string {
	t.Helper()
	var b strings.Builder
	for _, args := range [][]string{{"ps", "-a", "--format", "{{.Names}}"}, {"volume", "ls", "-q"}, {"images", "-q"}} {
		r := testhost.Run(t, asEngine(ctx, eu, append([]string{"podman"}, args...)...))
		if r.Code != 0 {
			t.Fatalf("podman %v as %s: %s", args, engineUser, r)
		}
		// The ssh:// test's probes (TestRemoteSSHEngine) come and go beside it.
		names := slices.DeleteFunc(strings.Fields(r.Stdout), func(n string) bool { return strings.HasPrefix(n, sshProbePrefix) })
		fmt.Fprintf(&b, "%s: %q; ", args[0], names)
	}
	return b.String()
}
