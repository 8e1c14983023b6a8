package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestRemoteRunSSH (issue #29, 4b): TestRemoteRun's sessions over ssh://,
// on the remote engine host (tests/host/engine-ssh.sh: sshd and
// AISB_ENGINE_SSH_USER's Podman service in a namespace of their own),
// reached as CONTAINER_HOST=ssh://USER@198.51.100.42/run/user/UID/podman/podman.sock
// with a key the test authorizes and a known_hosts pinning the host's key.
// What TestRemoteRun checks holds there, seen from the engine host's
// namespace (its controls run in it); besides, git over SSH goes through
// the gate on that host to the listed server, and after a SIGKILL of aisb
// the engine host's sshd has ended every login of the session and the
// caller keeps no tunnel of it.
func TestRemoteRunSSH(t *testing.T) {
	parallel(t)
	lockEngine(t, sshEngineUser)
	eu, err := user.Lookup(sshEngineUser)
	if err != nil {
		testhost.Skip(t, "engine user %s missing (run tests/host/setup.sh): %v", sshEngineUser, err)
	}
	caller, err := user.Lookup(testhost.User)
	if err != nil {
		t.Fatal(err)
	}
	as := asEngineIn(testhost.EngineNS)
	sock := "/run/user/" + eu.Uid + "/podman/podman.sock"
	pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
	ping := testhost.Run(t, as(pctx, eu, "curl", "-sS", "--max-time", "10", "--unix-socket", sock, "http://d/_ping"))
	pcancel()
	if strings.TrimSpace(ping.Stdout) != "OK" {
		testhost.Skip(t, "%s's service on the engine host %s does not answer (AISB_ENGINE_SSH_USER=%s tests/host/engine-ssh.sh up): %s", eu.Username, testhost.EngineNS, eu.Username, ping)
	}
	// The base's load into the engine's storage takes its own time (a
	// minute under make test's load); the key's minute starts after it.
	base := engineBaseImage(t, eu, as)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hostKey := testhost.EngineHostKey(t)
	dir := testhost.UserDir(t)
	os.Chmod(dir, 0o700)
	key := filepath.Join(dir, "id")
	if r := testhost.Run(t, testhost.UserCommand(ctx, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "aisb-test-run", "-f", key)); r.Code != 0 {
		t.Fatalf("ssh-keygen: %s", r)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	testhost.AuthorizeEngineKey(t, eu.Username, string(pub))
	known := filepath.Join(dir, "known_hosts")
	writeUserFile(t, known, testhost.EngineSSHAddr+" "+hostKey+"\n")
	remoteRun(t, base, remoteEngine{
		eu: eu, uri: fmt.Sprintf("ssh://%s@%s%s", eu.Username, testhost.EngineSSHAddr, sock),
		env: []string{"CONTAINER_SSHKEY=" + key, "AISB_SSH_KNOWN_HOSTS=" + known}, as: as,
		allowed: "sshengine.test", refused: "sshrefused.test", ssh: "sshgit.test",
		tunnels: "/run/user/" + caller.Uid + "/aisb/ssh-*",
		live:    &liveNames{listed: "sshlisted.test", live: "sshlive.test", ask: "sshask.test", refused: "sshliverefused.test"},
		offline: true,
	})
}

// remoteSSH: git over SSH from a remote engine's sandbox, through its gate
// on the engine's host, to the listed test SSH server; the refused name is
// refused for SSH too (never resolved). The key is a file of the project
// (--ssh-agent is refused there: a socket cannot be copied). Controls: the
// server answers the engine host without a sandbox, and the key and
// repository work from this host.
func remoteSSH(t *testing.T, ctx context.Context, a *aisbUser, e remoteEngine) {
	hostKey := testhost.SSHHostKey(t)
	if r := testhost.Run(t, e.as(ctx, e.eu, "bash", "-c", "exec 3<>/dev/tcp/"+testhost.SSHAddr+"/22 && head -c 8 <&3")); r.Stdout != "SSH-2.0-" {
		t.Fatalf("control: the test SSH server %s does not answer the engine's host without a sandbox: %s", testhost.SSHAddr, r)
	}
	keyFile := filepath.Join(a.project, "gitkey")
	if r := testhost.Run(t, testhost.UserCommand(ctx, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "aisb-test-remote-git", "-f", keyFile)); r.Code != 0 {
		t.Fatalf("ssh-keygen: %s", r)
	}
	t.Cleanup(func() { os.Remove(keyFile); os.Remove(keyFile + ".pub") })
	pub, err := os.ReadFile(keyFile + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	testhost.AuthorizeKey(t, string(pub))
	repo := newBareRepo(t)
	home := testhost.UserDir(t)
	knownHosts := filepath.Join(home, ".ssh", "known_hosts")
	writeUserFile(t, knownHosts, e.ssh+" "+hostKey+"\n"+e.refused+" "+hostKey+"\n")
	// Control: the key and the repository, from this host without aisb.
	hostSSH := "ssh -i " + keyFile + " -o IdentitiesOnly=yes -o HostName=" + testhost.SSHAddr + " -o HostKeyAlias=" + e.ssh +
		" -o UserKnownHostsFile=" + knownHosts + " -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o BatchMode=yes"
	if r := testhost.Run(t, testhost.UserCommand(ctx, "env", "GIT_SSH_COMMAND="+hostSSH, "git", "ls-remote", testhost.GitUser+"@"+e.ssh+":"+repo)); r.Code != 0 || !strings.Contains(r.Stdout, "refs/heads/main") {
		t.Fatalf("control: git ls-remote from this host: %s", r)
	}
	mark := testhost.DNSMark(t)
	script := `cp /project/gitkey /tmp/k && chmod 600 /tmp/k
export GIT_SSH_COMMAND="ssh -i /tmp/k -o IdentitiesOnly=yes -o BatchMode=yes"
git clone -q ` + testhost.GitUser + `@` + e.ssh + `:` + repo + ` /tmp/r && cd /tmp/r &&
git log --format='CLONED %s' -1 &&
echo "from the remote sandbox" > change && git add change &&
git -c user.name=agent -c user.email=agent@test commit -qm "pushed from the remote sandbox" &&
git push -q origin HEAD:main && echo PUSHED
git ls-remote ` + testhost.GitUser + `@` + e.refused + `:` + repo + ` && echo REFUSED-OK
true`
	start := time.Now()
	r := a.runEnv(t, []string{"HOME=" + home}, "run", "--allow-ssh", e.ssh, "--harness", "shell", "--", "sh", "-c", script)
	t.Logf("git over SSH from %s's sandbox: exit %d in %v", e.uri, r.Code, time.Since(start).Round(time.Millisecond))
	if r.Code != 0 || !strings.Contains(r.Stdout, "CLONED seed") || !strings.Contains(r.Stdout, "PUSHED") {
		t.Errorf("git over SSH through the remote gate: %s", r)
	}
	if strings.Contains(r.Stdout, "REFUSED-OK") || !strings.Contains(r.Stderr, "the gate refused "+e.refused+":22") {
		t.Errorf("SSH to the unlisted %s was not refused at the gate: %s", e.refused, r)
	}
	if log := serverLog(t, repo); !strings.HasPrefix(log, "pushed from the remote sandbox\nseed") {
		t.Errorf("the server's main after the push: %q", log)
	}
	seen := map[string]bool{}
	for _, ev := range a.events(t) {
		seen[fmt.Sprintf("%s:%d %s", ev.Host, ev.Port, ev.Rule)] = true
	}
	for _, want := range []string{e.ssh + ":22 " + audit.RuleAllowed, e.refused + ":22 " + audit.RuleSSHNotListed} {
		if !seen[want] {
			t.Errorf("the caller's audit lacks %q: %v", want, seen)
		}
	}
	if slices.Contains(testhost.DNSQueries(t, mark), e.refused) {
		t.Errorf("the gate resolved %s, refused for SSH", e.refused)
	}
	noneLeft(t, engineSession(t, ctx, e.eu, e.as))
}

// remoteSIGKILL: after a SIGKILL of aisb, the session's watchdog removes
// its containers and the project's volume from the engine, then ends; the
// gate's secrets are gone from the caller's session directory, the session
// is not listed by aisb ps, and over ssh:// no tunnel directory of the
// caller and no login of the engine user at its sshd is left.
func remoteSIGKILL(t *testing.T, ctx context.Context, a *aisbUser, e remoteEngine) {
	left := func() []string { return engineSession(t, ctx, e.eu, e.as) }
	logins := sshdSessions(t, e.eu)
	marker := fmt.Sprintf("remote-kill-%d", time.Now().UnixNano())
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	// The agent writes a file, then sleeps; after a SIGKILL of aisb, the
	// watchdog brings the file from the project's copy into the review's
	// layer before it removes the copy: nothing is lost.
	cmd := a.harness().Command(t, kctx, a.host, a.env, "run", "--allow", e.allowed, "--harness", "shell", "--", "sh", "-c",
		"echo before the kill > killed.txt; echo written; sleep 600; : "+marker)
	var out syncBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid int
	var id string
	// (Under make test's load a session there has taken over a minute to
	// start: a slow start is not what this checks.)
	err := testhost.WaitFor(3*time.Minute, func() error {
		l := left()
		if len(l) != 3 {
			return fmt.Errorf("on the engine: %v, not a gate, a sandbox and the project's volume", l)
		}
		for _, n := range l {
			if v, ok := strings.CutPrefix(n, "aisb-project-"); ok {
				id = v
			}
		}
		if pid = findProcess(a.bin, " run ", marker); pid == 0 {
			return errors.New("no aisb run process")
		}
		if !strings.Contains(out.String(), "written") {
			return errors.New("the agent has not written its file yet")
		}
		return nil
	})
	if err != nil || id == "" {
		t.Fatalf("the session never ran on the engine: %v", err)
	}
	// Controls: while the session runs, its tunnel and its logins are there.
	if e.tunnels != "" {
		if l, _ := filepath.Glob(e.tunnels); len(l) == 0 {
			t.Errorf("control: no ssh:// tunnel directory (%s) while the session runs", e.tunnels)
		}
		if n := sshdSessions(t, e.eu); n <= logins {
			t.Errorf("control: no sshd login of %s while the session runs (%d, %d before)", e.eu.Username, n, logins)
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	start := time.Now()
	if err := testhost.WaitFor(30*time.Second, func() error { return empty(left()) }); err != nil {
		t.Fatalf("30 s after SIGKILL of aisb the session is still on the engine: %v", err)
	}
	t.Logf("after SIGKILL of aisb, the watchdog brought the changes back and removed the session from the engine in %v", time.Since(start).Round(time.Millisecond))
	// The caller's side, once the watchdog has ended.
	if err := testhost.WaitFor(30*time.Second, func() error {
		if p := findProcess("internal-watchdog", id); p != 0 {
			return fmt.Errorf("the watchdog (pid %d) still runs", p)
		}
		return nil
	}); err != nil {
		t.Errorf("after SIGKILL of aisb: %v", err)
	}
	for _, p := range gate.SecretPaths(filepath.Join(a.state, "aisb", "sessions", id, "gate")) {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the killed session's gate secret %s is left (%v)", p, err)
		}
	}
	if ps := a.run(t, "ps", "--json"); ps.Code != 0 || strings.Contains(ps.Stdout, id) {
		t.Errorf("aisb ps after the killed session's end: %s", ps)
	}
	if rv := a.run(t, "review", id); rv.Code != 0 || !strings.Contains(rv.Stdout, "A killed.txt") {
		t.Errorf("aisb review %s after SIGKILL of aisb: %s", id, rv)
	}
	if rv := a.run(t, "review", "--apply", id); rv.Code != 0 {
		t.Errorf("aisb review --apply %s: %s", id, rv)
	}
	if b, err := os.ReadFile(filepath.Join(a.project, "killed.txt")); err != nil || string(b) != "before the kill\n" {
		t.Errorf("after review --apply, killed.txt is %q, %v", b, err)
	}
	if e.tunnels == "" {
		return
	}
	if l, _ := filepath.Glob(e.tunnels); len(l) != 0 {
		t.Errorf("the killed session's ssh:// tunnels are left on the caller's side: %q", l)
	}
	if err := testhost.WaitFor(30*time.Second, func() error {
		if n := sshdSessions(t, e.eu); n > logins {
			return fmt.Errorf("%d sshd logins of %s, %d before the session", n, e.eu.Username, logins)
		}
		return nil
	}); err != nil {
		t.Errorf("the engine host kept the killed session's logins: %v", err)
	}
}
