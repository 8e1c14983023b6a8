package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// Git over SSH through the gate, against OpenSSH's sshd in the test host's
// own namespace (tests/host/upstream.sh), with a throw-away user key held by
// an ssh-agent this test starts.

// sshFixture is one user's SSH setup on the host: a key in an agent, and a
// HOME whose ~/.ssh/known_hosts aisb reads.
type sshFixture struct {
	home  string // HOME for aisb
	sock  string // SSH_AUTH_SOCK
	repo  string // NAME.git at the server
	known string // home/.ssh/known_hosts
}

// userRun runs argv as the test user and fails the test if it fails.
func userRun(t *testing.T, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := testhost.Run(t, testhost.UserCommand(ctx, argv...))
	if r.Code != 0 {
		t.Fatalf("%v: %s", argv, r)
	}
	return r.Stdout
}

func newSSHFixture(t *testing.T) *sshFixture {
	t.Helper()
	testhost.Require(t)
	hostKey := testhost.SSHHostKey(t)
	f := &sshFixture{home: testhost.UserDir(t)}
	keys := testhost.UserDir(t)
	os.Chmod(keys, 0o700)

	// The throw-away user key, made by the test, authorized at the server.
	key := filepath.Join(keys, "id_ed25519")
	userRun(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "aisb-test-user", "-f", key)
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	testhost.AuthorizeKey(t, string(pub))

	// The user's known_hosts, hashed as Debian's ssh writes it, with a line
	// for another host that must not reach the sandbox.
	f.known = filepath.Join(f.home, ".ssh", "known_hosts")
	writeUserFile(t, f.known, "git.test "+hostKey+"\nunrelated.example "+hostKey+"\n")
	userRun(t, "ssh-keygen", "-q", "-H", "-f", f.known)
	os.Remove(f.known + ".old")

	// An ssh-agent holding the key, as the user runs one; it is stopped by
	// its pid when the test ends.
	f.sock = filepath.Join(keys, "agent.sock")
	out := userRun(t, "ssh-agent", "-s", "-a", f.sock)
	var pid int
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "SSH_AGENT_PID="); ok {
			pid, _ = strconv.Atoi(strings.TrimSuffix(strings.Fields(v)[0], ";"))
		}
	}
	if pid <= 1 {
		t.Fatalf("ssh-agent did not say its pid: %q", out)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGTERM) })
	userRun(t, "env", "SSH_AUTH_SOCK="+f.sock, "ssh-add", "-q", key)

	f.repo = newBareRepo(t)
	return f
}

// newBareRepo makes NAME.git with one commit on main in the git user's home
// at the server, removed when the test ends.
func newBareRepo(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("aisb-test-%d", time.Now().UnixNano())
	dir := filepath.Join(testhost.GitHome, name+".git")
	work := t.TempDir()
	for _, argv := range [][]string{
		{"git", "init", "-q", "--bare", "-b", "main", dir},
		{"git", "-C", work, "init", "-q", "-b", "main"},
		{"sh", "-c", "echo seeded > " + work + "/README"},
		{"git", "-C", work, "add", "README"},
		{"git", "-C", work, "-c", "user.name=seed", "-c", "user.email=seed@test", "commit", "-qm", "seed"},
		{"git", "-C", work, "push", "-q", dir, "main"},
		{"chown", "-R", testhost.GitUser + ":", dir},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return name + ".git"
}

// hostSSH runs a command using ssh on the host, without any sandbox or gate, with
// the user's known_hosts and agent: the control for every refusal.
func (f *sshFixture) hostSSH(t *testing.T, known string, argv ...string) testhost.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sshCmd := "ssh -o HostName=" + testhost.SSHAddr + " -o HostKeyAlias=git.test -o UserKnownHostsFile=" + known +
		" -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o BatchMode=yes"
	return testhost.Run(t, testhost.UserCommand(ctx, append([]string{"env", "SSH_AUTH_SOCK=" + f.sock, "GIT_SSH_COMMAND=" + sshCmd}, argv...)...))
}

func (f *sshFixture) env() []string { return []string{"HOME=" + f.home, "SSH_AUTH_SOCK=" + f.sock} }

// serverLog is the server's main branch, as the server sees it.
func serverLog(t *testing.T, repo string) string {
	t.Helper()
	out, err := exec.Command("git", "-c", "safe.directory=*", "--git-dir", filepath.Join(testhost.GitHome, repo), "log", "--format=%s", "main").CombinedOutput()
	if err != nil {
		t.Fatalf("git log at the server: %v\n%s", err, out)
	}
	return string(out)
}

// TestSSHGitThroughGate: clone, fetch and push over SSH to a listed host
// work with --ssh-agent, and the sandbox holds no private key.
func TestSSHGitThroughGate(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	f := newSSHFixture(t)
	// Control: the same operation from the host, no sandbox.
	if r := f.hostSSH(t, f.known, "git", "ls-remote", testhost.GitUser+"@git.test:"+f.repo); r.Code != 0 || !strings.Contains(r.Stdout, "refs/heads/main") {
		t.Fatalf("control: git ls-remote from the host: %s", r)
	}

	// A decoy key in the project proves the search below can find a key.
	a := newAisb(t, base, dnsConfig())
	userRun(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "decoy", "-f", filepath.Join(a.project, "decoy_key"))

	script := `set -e
echo "KNOWN $(wc -l </etc/ssh/ssh_known_hosts)"
ssh-add -l | sed 's/^/AGENT /'
git clone -q ` + testhost.GitUser + `@git.test:` + f.repo + ` /tmp/r
cd /tmp/r
git fetch -q origin
git log --format='CLONED %s' -1
echo "from the sandbox" > change
git add change
git -c user.name=agent -c user.email=agent@test commit -qm "pushed from the sandbox"
git push -q origin HEAD:main
echo PUSHED
# Every text file the agent can read, outside /proc, /sys and /dev, holding a PEM or OpenSSH private key.
grep -rlsIE -e '^-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev | sed 's/^/KEYFILE /' || true
# Every mount besides the image's root, /proc, /sys and /dev.
awk '{print "MOUNT " $5}' /proc/self/mountinfo | grep -Ev '^MOUNT (/|/proc.*|/sys.*|/dev.*)$' || true
`
	r := a.runEnv(t, f.env(), "run", "--allow-ssh", "git.test", "--ssh-agent", "--harness", "shell", "--", "sh", "-c", script)
	if r.Code != 0 || !strings.Contains(r.Stdout, "PUSHED") {
		t.Fatalf("git over SSH in the sandbox: %s", r)
	}
	if !strings.Contains(r.Stdout, "KNOWN 1\n") {
		t.Errorf("the sandbox's known_hosts should hold the one line for git.test: %s", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "AGENT 256 SHA256:") || !strings.Contains(r.Stdout, "aisb-test-user") {
		t.Errorf("the forwarded agent does not list the key: %s", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "CLONED seed") {
		t.Errorf("clone: %s", r.Stdout)
	}
	if log := serverLog(t, f.repo); !strings.HasPrefix(log, "pushed from the sandbox\nseed") {
		t.Errorf("the server's main after the push: %q", log)
	}
	var keyFiles, mounts []string
	for _, l := range strings.Split(r.Stdout, "\n") {
		if k, ok := strings.CutPrefix(l, "KEYFILE "); ok {
			keyFiles = append(keyFiles, k)
		}
		if m, ok := strings.CutPrefix(l, "MOUNT "); ok {
			mounts = append(mounts, m)
		}
	}
	if !slices.Equal(keyFiles, []string{"/project/decoy_key"}) {
		t.Errorf("private keys in the sandbox: %q, want only the decoy placed in the project", keyFiles)
	}
	allowedMounts := []string{"/project", "/etc/aisb", "/run/aisb-ssh-agent.sock", "/etc/resolv.conf", "/etc/hosts", "/etc/hostname", "/run/.containerenv"}
	for _, m := range mounts {
		if !slices.Contains(allowedMounts, m) {
			t.Errorf("unexpected mount in the sandbox: %s (all: %q)", m, mounts)
		}
	}
	if !slices.Contains(mounts, "/run/aisb-ssh-agent.sock") {
		t.Errorf("the agent socket is not mounted: %q", mounts)
	}
	events := a.events(t)
	if !slices.ContainsFunc(events, func(e audit.Event) bool { return e.Host == "git.test" && e.Port == 22 && e.Rule == audit.RuleAllowed }) {
		t.Errorf("no audit event for SSH to git.test:22: %+v", events)
	}
}

// TestSSHRefusals: without --ssh-agent ssh has no key; an unlisted name and a
// listed internal name are refused at the gate; a changed or unknown host
// key fails as it does on the host.
func TestSSHRefusals(t *testing.T) {
	base := testBaseImage(t)
	f := newSSHFixture(t)
	a := newAisb(t, base, dnsConfig())
	lsRemote := func(host string) string {
		return "git ls-remote " + testhost.GitUser + "@" + host + ":" + f.repo
	}
	run := func(t *testing.T, env []string, args ...string) testhost.Result {
		t.Helper()
		return a.runEnv(t, env, append(append([]string{"run"}, args...), "--harness", "shell", "--", "sh", "-c", "echo START; "+lsRemote("git.test")+" && echo LISTED-OK; "+lsRemote("gitother.test")+" && echo OTHER-OK; "+lsRemote("private.test")+" && echo PRIVATE-OK; true")...)
	}

	t.Run("no agent, no key", func(t *testing.T) {
		r := run(t, f.env(), "--allow-ssh", "git.test")
		if strings.Contains(r.Stdout, "LISTED-OK") || !strings.Contains(r.Stderr, "Permission denied (publickey)") {
			t.Errorf("ssh without --ssh-agent: %s", r)
		}
		if !strings.Contains(r.Stderr, "ssh in the sandbox has no key; add --ssh-agent") {
			t.Errorf("no word on the missing agent: %s", r.Stderr)
		}
	})

	t.Run("unlisted and internal", func(t *testing.T) {
		testhost.SSHBanner(t, testhost.SSHAddr)             // gitother.test's server, reachable without the sandbox
		testhost.SSHBanner(t, testhost.Internal["private"]) // private.test's port 22, reachable without the sandbox
		mark := testhost.DNSMark(t)
		r := run(t, f.env(), "--allow-ssh", "git.test", "--allow-ssh", "private.test", "--ssh-agent")
		if !strings.Contains(r.Stdout, "LISTED-OK") {
			t.Fatalf("control in the same sandbox: the listed host failed: %s", r)
		}
		if strings.Contains(r.Stdout, "OTHER-OK") || strings.Contains(r.Stdout, "PRIVATE-OK") {
			t.Errorf("an unlisted or internal host was reached: %s", r)
		}
		for _, want := range []string{"aisb: the gate refused gitother.test:22", "aisb run --allow-ssh gitother.test", "aisb: the gate refused private.test:22"} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr lacks %q: %s", want, r.Stderr)
			}
		}
		seen := map[string]bool{}
		for _, e := range a.events(t) {
			seen[fmt.Sprintf("%s:%d %s", e.Host, e.Port, e.Rule)] = true
		}
		for _, want := range []string{"gitother.test:22 " + audit.RuleSSHNotListed, "private.test:22 " + audit.RuleInternal, "git.test:22 " + audit.RuleAllowed} {
			if !seen[want] {
				t.Errorf("audit lacks %q: %v", want, seen)
			}
		}
		if slices.Contains(testhost.DNSQueries(t, mark), "gitother.test") {
			t.Errorf("the gate resolved gitother.test, refused for SSH")
		}
	})

	t.Run("changed host key", func(t *testing.T) {
		// A known_hosts whose git.test key is another one: ssh on the host
		// refuses it (the control), and so must ssh in the sandbox.
		other := testhost.UserDir(t)
		userRun(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(other, "k"))
		pub, _ := os.ReadFile(filepath.Join(other, "k.pub"))
		changed := &sshFixture{home: testhost.UserDir(t), sock: f.sock, repo: f.repo}
		changed.known = filepath.Join(changed.home, ".ssh", "known_hosts")
		fields := strings.Fields(string(pub))
		writeUserFile(t, changed.known, "git.test "+fields[0]+" "+fields[1]+"\n")
		if r := f.hostSSH(t, changed.known, "git", "ls-remote", testhost.GitUser+"@git.test:"+f.repo); r.Code == 0 || !strings.Contains(r.Stderr, "REMOTE HOST IDENTIFICATION HAS CHANGED") {
			t.Fatalf("control: ssh on the host accepted a changed key: %s", r)
		}
		r := run(t, changed.env(), "--allow-ssh", "git.test", "--ssh-agent")
		if strings.Contains(r.Stdout, "LISTED-OK") || !strings.Contains(r.Stderr, "REMOTE HOST IDENTIFICATION HAS CHANGED") || !strings.Contains(r.Stderr, "Host key verification failed") {
			t.Errorf("a changed host key was not refused in the sandbox: %s", r)
		}
	})

	t.Run("unknown host key", func(t *testing.T) {
		empty := &sshFixture{home: testhost.UserDir(t), sock: f.sock, repo: f.repo}
		r := run(t, empty.env(), "--allow-ssh", "git.test", "--ssh-agent")
		if strings.Contains(r.Stdout, "LISTED-OK") || !strings.Contains(r.Stderr, "Host key verification failed") {
			t.Errorf("an unknown host key was not refused: %s", r)
		}
		if !strings.Contains(r.Stderr, "no host key for git.test") {
			t.Errorf("no word on the missing host key: %s", r.Stderr)
		}
	})
}
