package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// upstreamSaw reports whether the test upstream logged a request for path.
func upstreamSaw(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testhost.StateDir, "connections.log"))
	if err != nil {
		t.Fatalf("read the upstream's log: %v", err)
	}
	return strings.Contains(string(b), " "+path+" ")
}

// userDir makes dir and its parent under the state directory, owned by the
// test user.
func userDir(t *testing.T, dir string) {
	t.Helper()
	u, _ := user.Lookup(testhost.User)
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.MkdirAll(d, 0o700)
		if out, err := exec.Command("chown", u.Uid+":"+u.Gid, d).CombinedOutput(); err != nil {
			t.Fatalf("chown %s: %v %s", d, err, out)
		}
	}
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// gateContainer is the name of the one running session gate.
func gateContainer(t *testing.T) string {
	t.Helper()
	for _, n := range sessionContainers(t) {
		if strings.HasPrefix(n, "aisb-gate-") {
			return n
		}
	}
	t.Fatalf("no gate container among %v", sessionContainers(t))
	return ""
}

// TestGateKilledMidSession: when the gate dies while the agent works, the
// agent's egress is gone (its next request never reaches the upstream),
// the user is told at once while the agent still runs, and the session's
// end says so again. Control: the same request before the kill arrives.
func TestGateKilledMidSession(t *testing.T) {
	a := newAisb(t, testBaseImage(t), dnsConfig())
	mark := fmt.Sprint(time.Now().UnixNano())
	before, after := "/before-"+mark, "/after-"+mark
	r := a.start(t, "run", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c",
		"probe http-proxy $HTTP_PROXY http://allowed.test"+before+"; echo before=$?; touch /project/ready; "+
			"while [ ! -e /project/go ]; do sleep 0.1; done; "+
			"probe http-proxy $HTTP_PROXY http://allowed.test"+after+"; echo after=$?")
	if !waitFor(3*time.Minute, func() bool { return exists(filepath.Join(a.project, "ready")) }) {
		t.Fatalf("the agent never got ready: %s %s", r.stdout, r.stderr)
	}
	if !upstreamSaw(t, before) {
		t.Fatalf("control: the request before the kill did not reach the upstream: %s", r.stdout)
	}
	// The gate's squid dies as a crash would: SIGKILL to its process.
	name := gateContainer(t)
	ins := testhost.Podman(t, "inspect", "--format", "{{.State.Pid}}", name)
	var pid int
	if _, err := fmt.Sscan(ins.Stdout, &pid); err != nil || pid <= 1 {
		t.Fatalf("the gate's pid: %s", ins)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the gate: %v", err)
	}
	if !waitFor(3*time.Second, func() bool { return r.stderrSays("gate", "stopped") }) || r.exited() {
		t.Errorf("3 s after the gate died, while the agent still runs, stderr says nothing: %q", r.stderr)
	}
	writeUserFile(t, filepath.Join(a.project, "go"), "")
	res := r.wait(t, time.Minute)
	if !strings.Contains(res.Stdout, "after=1") || upstreamSaw(t, after) {
		t.Errorf("the request after the gate died got out: %s", res)
	}
	if strings.Count(res.Stderr, "gate") < 2 || !strings.Contains(res.Stderr, "lost its gate") {
		t.Errorf("the session's end does not say it lost its gate: %s", res)
	}
	if res.Code == 0 {
		t.Errorf("a session that lost its gate exits 0: %s", res)
	}
	if !waitGone(t, 20*time.Second) {
		t.Errorf("containers remain: %v", sessionContainers(t))
	}
}

// TestTLSPortIntruderStopsTheGate: squid shares its TLS port (SO_REUSEPORT,
// for aisb's hold of it at start), so another process of the user's uid on
// the host's network could join it and take tunnels the front hands over.
// When one does, the session's watch stops the gate: the agent's next HTTPS
// request never reaches the upstream and the user is told why. The controls:
// a request before passes, and the intruder really joined the port.
func TestTLSPortIntruderStopsTheGate(t *testing.T) {
	a := newAisb(t, testBaseImage(t), dnsConfig())
	mark := fmt.Sprint(time.Now().UnixNano())
	before, after := "/tls-before-"+mark, "/tls-after-"+mark
	curl := `curl -sSk -o /dev/null -w "%{http_code}" https://allowed.test`
	r := a.start(t, "run", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c",
		curl+before+"; rc=$?; echo; echo before=$rc; touch /project/ready; "+
			"while [ ! -e /project/go ]; do sleep 0.1; done; "+
			curl+after+"; rc=$?; echo; echo after=$rc")
	if !waitFor(3*time.Minute, func() bool { return exists(filepath.Join(a.project, "ready")) }) {
		t.Fatalf("the agent never got ready: %s %s", r.stdout, r.stderr)
	}
	if !upstreamSaw(t, before) {
		t.Fatalf("control: the HTTPS request before did not reach the upstream: %s", r.stdout)
	}
	confs, _ := filepath.Glob(filepath.Join(a.state, "aisb", "sessions", "*", "gate", "squid.conf"))
	if len(confs) != 1 {
		t.Fatalf("squid.conf files: %v", confs)
	}
	b, _ := os.ReadFile(confs[0])
	m := regexp.MustCompile(`http_port 127\.0\.0\.1:(\d+) name=gate_tls `).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no TLS port in %s", confs[0])
	}
	// The intruder: the user's uid, the host's network, SO_REUSEPORT.
	// It leaves when its stdin closes.
	intruder := testhost.UserCommand(context.Background(), "python3", "-c", `import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
print("joined", flush=True)
sys.stdin.read()
`, string(m[1]))
	out, err := intruder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := intruder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := intruder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close()
		intruder.Wait()
	}()
	line := make([]byte, 7)
	if n, _ := out.Read(line); string(line[:n]) != "joined\n" {
		t.Fatalf("control: the intruder did not join the TLS port %s: %q", m[1], line[:n])
	}
	if !waitFor(3*time.Second, func() bool { return r.stderrSays("TLS port", "stopped") }) || r.exited() {
		t.Errorf("3 s after another socket joined the TLS port, while the agent still runs, stderr says nothing: %q", r.stderr)
	}
	writeUserFile(t, filepath.Join(a.project, "go"), "")
	res := r.wait(t, time.Minute)
	if strings.Contains(res.Stdout, "after=0") || upstreamSaw(t, after) {
		t.Errorf("the HTTPS request after the intruder joined got out: %s", res)
	}
	if res.Code == 0 {
		t.Errorf("a session whose gate was stopped exits 0: %s", res)
	}
	if !waitGone(t, 20*time.Second) {
		t.Errorf("containers remain: %v", sessionContainers(t))
	}
}

// TestSignalsReachTheAgent: SIGTERM, SIGHUP and SIGINT to aisb reach the
// agent (its trap runs), and nothing remains afterwards.
func TestSignalsReachTheAgent(t *testing.T) {
	a := newAisb(t, testBaseImage(t), "")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			os.Remove(filepath.Join(a.project, "ready"))
			os.Remove(filepath.Join(a.project, "signal"))
			r := a.start(t, "run", "--net", "none", "--harness", "shell", "--", "sh", "-c",
				`for s in TERM HUP INT; do trap "echo got-$s > /project/signal; exit 3" $s; done; touch /project/ready; while :; do sleep 0.1; done`)
			if !waitFor(3*time.Minute, func() bool { return exists(filepath.Join(a.project, "ready")) }) {
				t.Fatalf("the agent never got ready: %s %s", r.stdout, r.stderr)
			}
			pid := findProcess(a.bin, " run ")
			if pid == 0 {
				t.Fatal("no aisb process")
			}
			syscall.Kill(pid, sig)
			res := r.wait(t, 30*time.Second)
			name := strings.TrimPrefix(sig.String(), "SIG")
			if b, _ := os.ReadFile(filepath.Join(a.project, "signal")); strings.TrimSpace(string(b)) != "got-"+signalName(sig) || res.Code != 3 {
				t.Errorf("%s: the agent's trap said %q; aisb %s", name, b, res)
			}
			if !waitGone(t, 20*time.Second) {
				t.Errorf("containers remain: %v", sessionContainers(t))
			}
		})
	}
}

func signalName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGHUP: "HUP", syscall.SIGINT: "INT"}[s]
}

// TestPodmanServiceDiesMidSession: the service aisb drives dies while the
// agent runs; aisb says so at once, and once a service answers on the same
// socket again it removes the sandbox and the gate itself.
func TestPodmanServiceDiesMidSession(t *testing.T) {
	testhost.Require(t)
	u, _ := user.Lookup(testhost.User)
	sock := fmt.Sprintf("/run/user/%s/aisb-faults-%d.sock", u.Uid, time.Now().UnixNano())
	startService := func() *exec.Cmd {
		cmd := testhost.UserCommand(context.Background(), "podman", "system", "service", "--time=0", "unix://"+sock)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// SIGTERM, which runuser passes on; SIGKILL would orphan the service.
		t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
		if !waitFor(10*time.Second, func() bool { return exists(sock) }) {
			t.Fatal("the podman service did not come up")
		}
		return cmd
	}
	startService()
	a := newAisb(t, testBaseImage(t), dnsConfig())
	a.host = "unix://" + sock
	r := a.start(t, "run", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c", "touch /project/ready; sleep 600")
	if !waitFor(3*time.Minute, func() bool { return exists(filepath.Join(a.project, "ready")) }) {
		t.Fatalf("the agent never got ready: %s %s", r.stdout, r.stderr)
	}
	svc := findProcess("podman", "system", "service", sock)
	if svc == 0 {
		t.Fatal("no podman service process")
	}
	syscall.Kill(svc, syscall.SIGKILL)
	os.Remove(sock)
	if !waitFor(5*time.Second, func() bool { return r.stderrSays("lost the Podman service") }) {
		t.Errorf("5 s after the service died aisb says nothing: %q", r.stderr)
	}
	time.Sleep(2 * time.Second)
	if n := len(sessionContainers(t)); n != 2 {
		t.Errorf("control: with no service nothing could remove the 2 containers, yet %d remain", n)
	}
	startService()
	res := r.wait(t, time.Minute)
	if !strings.Contains(res.Stderr, "removed") || res.Code == 0 {
		t.Errorf("after the service came back: %s", res)
	}
	if left := sessionContainers(t); len(left) > 0 {
		t.Errorf("containers remain once Podman is reachable again: %v", left)
	}
}

// TestAuditDirectoryUnwritable: a session whose audit cannot be written does
// not start; one whose audit disk fills up mid-session tells the user at
// once that auditing stopped, and its end says the audit is incomplete.
func TestAuditDirectoryUnwritable(t *testing.T) {
	base := testBaseImage(t)
	t.Run("read-only at start", func(t *testing.T) {
		a := newAisb(t, base, dnsConfig())
		dir := filepath.Join(a.state, "aisb", "audit")
		userDir(t, dir)
		os.Chmod(dir, 0o500)
		res := a.run(t, "run", "--allow", "allowed.test", "--harness", "shell", "--", "touch", "/project/ran")
		if res.Code == 0 || !strings.Contains(res.Stderr, "audit") || exists(filepath.Join(a.project, "ran")) {
			t.Errorf("a session with an unwritable audit directory: %s", res)
		}
		if left := sessionContainers(t); len(left) > 0 {
			t.Errorf("containers remain: %v", left)
		}
	})
	t.Run("full mid-session", func(t *testing.T) {
		a := newAisb(t, base, dnsConfig())
		dir := filepath.Join(a.state, "aisb", "audit")
		userDir(t, dir)
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Fatalf("mount a small tmpfs: %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
		u, _ := user.Lookup(testhost.User)
		exec.Command("chown", u.Uid+":"+u.Gid, dir).Run()
		// Leave a few KB: the first events fit, the rest do not.
		exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(dir, "filler"), "bs=1k", "count=56").Run()
		r := a.start(t, "run", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c",
			"for i in $(seq 80); do probe http-proxy $HTTP_PROXY http://allowed.test/audit-$i >/dev/null; done; echo requests-done; touch /project/ready; sleep 5")
		if !waitFor(3*time.Minute, func() bool { return exists(filepath.Join(a.project, "ready")) }) {
			t.Fatalf("the agent never finished its requests: %s %s", r.stdout, r.stderr)
		}
		if !waitFor(3*time.Second, func() bool { return r.stderrSays("audit", "stopped") }) || r.exited() {
			t.Errorf("while the agent still runs, stderr does not say auditing stopped: %q", r.stderr)
		}
		res := r.wait(t, time.Minute)
		if !strings.Contains(res.Stderr, "incomplete") {
			t.Errorf("the session's end does not say the audit is incomplete: %s", res)
		}
	})
}
