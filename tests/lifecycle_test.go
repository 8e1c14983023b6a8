package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// sessionContainers lists the names of aisb's containers.
func sessionContainers(t *testing.T) []string {
	t.Helper()
	r := testhost.Podman(t, "ps", "-a", "--filter", "label="+engine.LabelKind, "--format", "{{.Names}}")
	return strings.Fields(r.Stdout)
}

// findProcess returns the pid of the test user's process whose command line
// contains all of words. Only the test user's: the other test user's tests
// run beside these (tests/run.sh).
func findProcess(words ...string) int {
	uid := userUID()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if fi, err := os.Stat(filepath.Join("/proc", e.Name())); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uid {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		all := true
		for _, w := range words {
			all = all && strings.Contains(cmdline, w)
		}
		if all && !strings.Contains(cmdline, "runuser") {
			return pid
		}
	}
	return 0
}

// userUID is the test user's uid.
func userUID() uint32 {
	u, err := user.Lookup(testhost.User)
	if err != nil {
		return 0
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(uid)
}

// startKillable starts `aisb run -- sleep 600` and waits until its gate and
// sandbox both exist; it returns the aisb process id.
func startKillable(t *testing.T, a *aisbUser) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cmd := testhost.UserCommand(ctx, a.command(t, ctx, "run", "--harness", "shell", "--", "sleep", "600")...)
	cmd.Dir = a.project
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid int
	err := testhost.WaitFor(time.Minute, func() error {
		if left := sessionContainers(t); len(left) != 2 {
			return fmt.Errorf("the session has %d containers, not a gate and a sandbox: %v", len(left), left)
		}
		if pid = findProcess(a.bin, " run "); pid == 0 {
			return errors.New("no aisb run process")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the session never had a gate and a sandbox: %v", err)
	}
	return pid
}

func waitGone(t *testing.T, within time.Duration) bool {
	t.Helper()
	return testhost.WaitFor(within, func() error { return empty(sessionContainers(t)) }) == nil
}

// empty is WaitFor's condition that a listing is empty.
func empty(left []string) error {
	if len(left) > 0 {
		return fmt.Errorf("left: %v", left)
	}
	return nil
}

// TestKilledSessionLeavesNothing: after SIGKILL of aisb, its watchdog removes
// the gate and the sandbox; if the watchdog dies too, the next aisb
// invocation reaps them.
func TestKilledSessionLeavesNothing(t *testing.T) {
	a := newAisb(t, testBaseImage(t), "")
	if left := sessionContainers(t); len(left) > 0 {
		t.Fatalf("containers before the test: %v", left)
	}

	t.Run("watchdog", func(t *testing.T) {
		pid := startKillable(t, a)
		syscall.Kill(pid, syscall.SIGKILL)
		if !waitGone(t, 20*time.Second) {
			t.Fatalf("20 s after SIGKILL the session's containers remain: %v", sessionContainers(t))
		}
		// Its audit may lack the gate's last decisions, and says so.
		if r := a.run(t, "audit"); r.Code != 0 || !strings.Contains(r.Stderr, "may be incomplete") || !strings.Contains(r.Stderr, "ended without finishing") {
			t.Errorf("aisb audit after the session's aisb was killed: %s", r)
		}
	})

	t.Run("reaped by the next invocation", func(t *testing.T) {
		pid := startKillable(t, a)
		watchdog := findProcess(a.bin, "internal-watchdog")
		if watchdog == 0 {
			t.Fatal("no watchdog process")
		}
		syscall.Kill(watchdog, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGKILL)
		// Control: with both gone, nothing removes the containers by itself.
		time.Sleep(3 * time.Second)
		if n := len(sessionContainers(t)); n != 2 {
			t.Fatalf("control: want the 2 orphaned containers still there, have %d", n)
		}
		r := a.run(t, "gate", "status")
		if r.Code != 0 || !strings.Contains(r.Stderr, "left by a session that ended without cleaning up") {
			t.Errorf("gate status: %s", r)
		}
		if left := sessionContainers(t); len(left) > 0 {
			t.Errorf("after the next invocation containers remain: %v", left)
		}
	})
}

// TestGateUpDownAudit: a long-lived gate shared by a session, audited under
// its name, and aisb audit's readable and JSON forms.
func TestGateUpDownAudit(t *testing.T) {
	a := newAisb(t, testBaseImage(t), "version = 1\n[network]\ndns = [\""+testhost.UpstreamAddr+"\"]\n")
	if r := a.run(t, "gate", "up", "--allow", "allowed.test", "shared"); r.Code != 0 {
		t.Fatalf("gate up: %s", r)
	}
	t.Cleanup(func() { a.run(t, "gate", "down", "shared") })
	if r := a.run(t, "gate", "status"); !strings.Contains(r.Stdout, "shared  long-lived  running") {
		t.Errorf("gate status: %s", r)
	}
	r := a.run(t, "run", "--gate", "shared", "--harness", "shell", "--", "sh", "-c",
		"probe http-proxy $HTTP_PROXY http://allowed.test/; probe http-proxy $HTTP_PROXY http://blocked.test/; true")
	if r.Code != 0 || !strings.Contains(r.Stdout, "status 200") {
		t.Fatalf("run through the shared gate: %s", r)
	}
	var out testhost.Result
	for i := 0; i < 50; i++ { // the follower converts within a second
		if out = a.run(t, "audit", "--session", "shared", "--blocked"); strings.Contains(out.Stdout, "blocked.test") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(out.Stdout, "BLOCKED  GET blocked.test:80  403  not_listed") || !strings.Contains(out.Stdout, "aisb run --allow blocked.test") || strings.Contains(out.Stdout, "ALLOWED") {
		t.Errorf("aisb audit --blocked:\n%s", out)
	}
	js := a.run(t, "audit", "--session", "shared", "--json")
	if n := strings.Count(js.Stdout, "\n"); n != 2 || !strings.Contains(js.Stdout, `"event":"network_allowed"`) {
		t.Errorf("aisb audit --json: %d lines\n%s", n, js.Stdout)
	}
	if r := a.run(t, "gate", "down", "shared"); r.Code != 0 {
		t.Errorf("gate down: %s", r)
	}
	if left := sessionContainers(t); len(left) > 0 {
		t.Errorf("after gate down: %v", left)
	}
}
