// TestRemoteRun and its helpers, in one file of about 390 lines: one
// engine user's service, one project and one set of controls are shared
// by the modes, the review, the credential and the leftovers' checks.

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

	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestRemoteRun (issue #29, items 1, 2 and 4a): `aisb run` on another
// unprivileged user's rootless Podman, reached as CONTAINER_HOST=unix://…,
// goes through that engine's API alone. In allow mode curl reaches the
// allowed name through the gate, while the refused name (never resolved)
// and a direct connection are refused, and both decisions are in the
// caller's `aisb audit`; --net none reaches nothing, --net open reaches the
// upstream directly; a credential's key reaches the upstream, never the
// sandbox. Whether the engine sees the project at the same path is
// checked, and it does not: not at all (the project is 0700), not as the
// caller (opened to it, its files would be its uid's), not the same
// directory (another one mounted at that path in its namespace). The
// agent sees a copy of the project, without what
// git ignores, and its changes reach the caller's project only through
// aisb review --apply (a remote session is a review session). After
// each run, and after a SIGKILL of aisb, nothing of the session is left on
// the engine. Controls: the caller's files are not visible to the engine
// user (its shell cannot list the project, its container cannot mount
// it), and the upstream is reachable from the engine's host without the
// sandbox.
func TestRemoteRun(t *testing.T) {
	parallel(t)
	lockEngine(t)
	began := time.Now()
	eu, err := user.Lookup(engineUser)
	if err != nil {
		testhost.Skip(t, "engine user %s missing (run tests/host/setup.sh): %v", engineUser, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	base := engineBaseImage(t, ctx, eu)
	sock := startEngineService(t, eu)
	a := newAisb(t, base, dnsConfig())
	a.host = "unix://" + sock
	up := testhost.UpstreamAddr

	// The premise, and its control: the engine user cannot see the
	// caller's project, neither from its shell nor from its containers.
	if err := os.Chmod(a.project, 0o700); err != nil {
		t.Fatal(err)
	}
	testhost.WriteUserFile(t, filepath.Join(a.project, "kept.txt"), "from the caller\n")
	testhost.WriteUserFile(t, filepath.Join(a.project, ".gitignore"), "ignored.txt\n")
	testhost.WriteUserFile(t, filepath.Join(a.project, "ignored.txt"), "ignored by git\n")
	if r := testhost.Run(t, testhost.UserCommand(ctx, "git", "-C", a.project, "init", "-q")); r.Code != 0 {
		t.Fatalf("git init: %s", r)
	}
	if r := testhost.Run(t, asEngine(ctx, eu, "ls", a.project)); r.Code == 0 {
		t.Fatalf("control: %s lists the caller's project %s: %s", engineUser, a.project, r)
	}
	if r := testhost.Run(t, asEngine(ctx, eu, "podman", "run", "--rm", "--network=none", "-v", a.project+":/p", base, "cat", "/p/kept.txt")); r.Code == 0 || strings.Contains(r.Stdout, "from the caller") {
		t.Fatalf("control: a container of %s reads the caller's project: %s", engineUser, r)
	}
	// Control: the upstream answers on the engine's host without a sandbox.
	if r := testhost.Run(t, asEngine(ctx, eu, "curl", "-sSk", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "https://"+up+"/")); r.Code != 0 || r.Stdout != "200" {
		t.Fatalf("control: the upstream does not answer %s on this host: %s", engineUser, r)
	}

	t.Run("allow", func(t *testing.T) {
		mark := testhost.DNSMark(t)
		start := time.Now()
		r := a.runEnv(t, []string{"AISB_TRACE=1"}, "run", "--allow", "remote.test", "--harness", "shell", "--", "sh", "-c",
			"cat kept.txt; test -e ignored.txt; echo ignored=$?; echo agent > made.txt; "+
				"curl -sSk --max-time 10 -o /dev/null -w 'allowed=%{http_code}\\n' https://remote.test/; "+
				"curl -sSk --max-time 10 -o /dev/null -w 'refusedname=%{http_connect}\\n' https://remoterefused.test/; "+
				"curl -sSk --noproxy '*' --max-time 5 -o /dev/null https://"+up+"/; echo direct=$?")
		t.Logf("aisb run --allow on %s's engine: exit %d in %v", engineUser, r.Code, time.Since(start).Round(time.Millisecond))
		for _, want := range []string{"from the caller", "ignored=1", "allowed=200", "refusedname=403", "direct=7"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("run --allow remote.test: want %q: %s", want, r)
			}
		}
		// The engine user cannot see the caller's project (0700): the
		// path check says "not shared" (its container cannot enter the
		// mounted project), so it is a copy.
		for _, want := range []string{"trace: engine at " + a.host + " is not local", "engine not local", "gate ready", "project copied to the engine",
			"project path checked on the engine: not shared (a container there ",
			"the project is not shared with it (", "this is a review session; the project is copied to volume aisb-project-",
			"review: the copy's changes brought back (1 changed or new, 0 deleted)"} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("run --allow remote.test: stderr lacks %q: %s", want, r.Stderr)
			}
		}
		for _, l := range strings.Split(r.Stderr, "\n") {
			if strings.Contains(l, "trace:") && (strings.Contains(l, "gate") || strings.Contains(l, "project") || strings.Contains(l, "done")) {
				t.Logf("%s", l)
			}
		}
		if slices.Contains(testhost.DNSQueries(t, mark), "remoterefused.test") {
			t.Errorf("the refused name remoterefused.test was resolved")
		}
		// A review session: the agent's file is not in the project until
		// aisb review --apply brings it back from the copy.
		if _, err := os.Stat(filepath.Join(a.project, "made.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the agent's change reached the caller's project before review: %v", err)
		}
		if rv := a.run(t, "review"); rv.Code != 0 || !strings.Contains(rv.Stdout, "A made.txt") || strings.Contains(rv.Stdout, "ignored.txt") {
			t.Errorf("aisb review after the remote session: %s", rv)
		}
		if rv := a.run(t, "review", "--apply"); rv.Code != 0 {
			t.Errorf("aisb review --apply: %s", rv)
		}
		if b, err := os.ReadFile(filepath.Join(a.project, "made.txt")); err != nil || string(b) != "agent\n" {
			t.Errorf("after review --apply, made.txt is %q, %v", b, err)
		}
		if b, err := os.ReadFile(filepath.Join(a.project, "ignored.txt")); err != nil || string(b) != "ignored by git\n" {
			t.Errorf("after review --apply, the ignored file is %q, %v", b, err)
		}
		// The audit, on the caller's side, complete at exit.
		au := a.run(t, "audit")
		for _, want := range []string{"ALLOWED  CONNECT remote.test:443  200", "BLOCKED  CONNECT remoterefused.test:443  403"} {
			if !strings.Contains(au.Stdout, want) {
				t.Errorf("aisb audit lacks %q: %s", want, au)
			}
		}
		noneLeft(t, ctx, eu)
	})

	t.Run("none", func(t *testing.T) {
		// The project open to everyone for this run: the engine user's
		// container sees it at the same path and writes beside aisb's
		// token, but as the engine user, so the agent's files would not
		// be the caller's: not shared, the copy.
		if err := os.Chmod(a.project, 0o777); err != nil {
			t.Fatal(err)
		}
		r := a.runEnv(t, []string{"AISB_TRACE=1"}, "run", "--net", "none", "--harness", "shell", "--", "sh", "-c",
			"cat kept.txt; curl -sSk --noproxy '*' --max-time 5 -o /dev/null https://"+up+"/; echo direct=$?")
		if err := os.Chmod(a.project, 0o700); err != nil {
			t.Fatal(err)
		}
		if r.Code != 0 || !strings.Contains(r.Stdout, "from the caller") || !strings.Contains(r.Stdout, "direct=7") {
			t.Errorf("run --net none on %s's engine: %s", engineUser, r)
		}
		uidWord := "a container there sees the project, but what the agent writes there is uid " + eu.Uid + "'s here, not yours"
		if !strings.Contains(r.Stderr, "project path checked on the engine: not shared ("+uidWord) || !strings.Contains(r.Stderr, "project copied to the engine") {
			t.Errorf("run on %s's engine with the project open to it: the check did not refuse the engine user's uid: %s", engineUser, r.Stderr)
		}
		ents, _ := os.ReadDir(a.project)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".aisb-pathcheck") {
				t.Errorf("the path check left %s in the project", e.Name())
			}
		}
		noneLeft(t, ctx, eu)
	})

	t.Run("another directory", func(t *testing.T) {
		// The engine has a directory at the project's path that is not the
		// project: a tmpfs mounted over that path in the engine user's own
		// mount namespace (podman unshare), which the caller never sees.
		// The check finds no token there: not shared, the copy.
		mount := asEngine(ctx, eu, "podman", "unshare", "sh", "-c", `mount -t tmpfs -o size=1m aisb-decoy "$1" && echo decoy > "$1/decoy.txt"`, "sh", a.project)
		if r := testhost.Run(t, mount); r.Code != 0 {
			t.Fatalf("mount a decoy over %s in %s's namespace: %s", a.project, engineUser, r)
		}
		defer func() {
			if r := testhost.Run(t, asEngine(ctx, eu, "podman", "unshare", "umount", a.project)); r.Code != 0 {
				t.Errorf("unmount the decoy: %s", r)
			}
		}()
		// Controls: a container of the engine sees a directory there, the
		// decoy; the caller's project is another.
		if r := testhost.Run(t, asEngine(ctx, eu, "podman", "run", "--rm", "--network=none", "-v", a.project+":/p", base, "cat", "/p/decoy.txt")); r.Code != 0 || r.Stdout != "decoy\n" {
			t.Fatalf("control: %s's container does not see the decoy at %s: %s", engineUser, a.project, r)
		}
		if _, err := os.Stat(filepath.Join(a.project, "decoy.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("control: the caller sees the decoy: %v", err)
		}
		r := a.runEnv(t, []string{"AISB_TRACE=1"}, "run", "--net", "none", "--harness", "shell", "--", "sh", "-c", "cat kept.txt; test -e decoy.txt; echo decoy=$?")
		if r.Code != 0 || !strings.Contains(r.Stdout, "from the caller") || !strings.Contains(r.Stdout, "decoy=1") {
			t.Errorf("run on %s's engine with another directory at the project's path: %s", engineUser, r)
		}
		if !strings.Contains(r.Stderr, "project path checked on the engine: not shared (there is a directory at that path there, but without aisb's token: it is another directory of that name)") ||
			!strings.Contains(r.Stderr, "project copied to the engine") {
			t.Errorf("the check did not find the other directory: %s", r.Stderr)
		}
		noneLeft(t, ctx, eu)
	})

	t.Run("open", func(t *testing.T) {
		r := a.run(t, "run", "--net", "open", "--harness", "shell", "--", "sh", "-c",
			"curl -sSk --noproxy '*' --max-time 10 -o /dev/null -w 'direct=%{http_code}\\n' https://"+up+"/")
		if r.Code != 0 || !strings.Contains(r.Stdout, "direct=200") {
			t.Errorf("run --net open on %s's engine: %s", engineUser, r)
		}
		noneLeft(t, ctx, eu)
	})

	t.Run("credential", func(t *testing.T) {
		// The key stays on the caller's side of the gate: the sandbox holds
		// a placeholder, the upstream gets the key.
		ac := newAisb(t, base, dnsConfig()+`upstream_ca = ["`+filepath.Join(testhost.StateDir, "ca.pem")+`"]

[[credentials]]
host = "remote.test"
header = "x-api-key"
env = "TEST_API_KEY"
`)
		ac.host = a.host
		secret := fmt.Sprintf("remote-key-%d", time.Now().UnixNano())
		headers := filepath.Join(testhost.StateDir, "headers.log")
		fi, err := os.Stat(headers)
		if err != nil {
			t.Fatal(err)
		}
		r := ac.runEnv(t, []string{"TEST_API_KEY=" + secret}, "run", "--harness", "shell", "--", "sh", "-c",
			`echo "key=$TEST_API_KEY"; curl -sS --max-time 10 -o /dev/null -w 'code=%{http_code}\n' https://remote.test/remote-credential`)
		if r.Code != 0 || !strings.Contains(r.Stdout, "code=200") || strings.Contains(r.Stdout, secret) || !strings.Contains(r.Stdout, "key=aisb-placeholder") {
			t.Errorf("run --credential on %s's engine: %s", engineUser, r)
		}
		b, err := os.ReadFile(headers)
		if err != nil || int64(len(b)) < fi.Size() || !strings.Contains(string(b[fi.Size():]), secret) {
			t.Errorf("the upstream did not get the key the gate sets (%v)", err)
		}
		noneLeft(t, ctx, eu)
	})

	t.Run("gate killed", func(t *testing.T) {
		// Fail closed: a remote gate that dies stops its sandbox (aisb
		// cannot hold the gate's port on the engine's host).
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer gcancel()
		cmd := testhost.UserCommand(gctx, a.command(t, gctx, "run", "--allow", "remote.test", "--harness", "shell", "--", "sleep", "600")...)
		cmd.Dir = a.project
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var gateName string
		err := testhost.WaitFor(time.Minute, func() error {
			for _, n := range engineSession(t, ctx, eu) {
				if strings.HasPrefix(n, "aisb-gate-") {
					gateName = n
				}
			}
			if gateName == "" || len(engineSession(t, ctx, eu)) != 3 {
				return errors.New("the session does not run yet")
			}
			return nil
		})
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the session never ran on the engine: %v", err)
		}
		time.Sleep(time.Second) // the sandbox's command runs, the watch began
		start := time.Now()
		if r := testhost.Run(t, asEngine(ctx, eu, "podman", "kill", gateName)); r.Code != 0 {
			t.Fatalf("kill the gate as %s: %s", engineUser, r)
		}
		werr := cmd.Wait()
		t.Logf("aisb ended %v after its remote gate was killed: %v", time.Since(start).Round(time.Millisecond), werr)
		if werr == nil || !strings.Contains(out.String(), "so it stops the sandbox") || time.Since(start) > time.Minute {
			t.Errorf("aisb after its remote gate was killed: %v\n%s", werr, out.String())
		}
		noneLeft(t, ctx, eu)
	})

	t.Run("sigkill", func(t *testing.T) {
		// The agent writes a file, then sleeps; after a SIGKILL of aisb,
		// the watchdog brings the file from the project's copy into the
		// review's layer before it removes the copy: nothing is lost.
		marker := fmt.Sprintf("remote-kill-%d", time.Now().UnixNano())
		kctx, kcancel := context.WithCancel(ctx)
		defer kcancel()
		before := a.sessionIDs(t)
		cmd := testhost.UserCommand(kctx, a.command(t, kctx, "run", "--allow", "remote.test", "--harness", "shell", "--", "sh", "-c",
			"echo before the kill > killed.txt; echo written; sleep 600; : "+marker)...)
		cmd.Dir = a.project
		var out syncBuffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		var pid int
		err := testhost.WaitFor(time.Minute, func() error {
			if left := engineSession(t, ctx, eu); len(left) != 3 {
				return fmt.Errorf("on the engine: %v, not a gate, a sandbox and the project's volume", left)
			}
			if pid = findProcess(a.bin, " run ", marker); pid == 0 {
				return errors.New("no aisb run process")
			}
			if !strings.Contains(out.String(), "written") {
				return errors.New("the agent has not written its file yet")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("the session never ran on the engine: %v", err)
		}
		syscall.Kill(pid, syscall.SIGKILL)
		start := time.Now()
		if err := testhost.WaitFor(30*time.Second, func() error { return empty(engineSession(t, ctx, eu)) }); err != nil {
			t.Fatalf("30 s after SIGKILL of aisb the session is still on the engine: %v", err)
		}
		t.Logf("after SIGKILL of aisb, the watchdog brought the changes back and removed the session from the engine in %v", time.Since(start).Round(time.Millisecond))
		var id string
		for _, s := range a.sessionIDs(t) {
			if !slices.Contains(before, s) {
				id = s
			}
		}
		if id == "" {
			t.Fatalf("no session directory of the killed run")
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
	})
	t.Logf("TestRemoteRun's own work: %v", time.Since(began).Round(time.Millisecond))
}

// engineBaseImage is the base image in the engine user's storage: the test
// base image is the caller's, so the engine gets testhost.BaseImage, loaded
// from the caller's storage when it lacks it.
func engineBaseImage(t *testing.T, ctx context.Context, eu *user.User) string {
	t.Helper()
	base := testhost.BaseImage
	if r := testhost.Run(t, asEngine(ctx, eu, "podman", "image", "exists", base)); r.Code == 0 {
		return base
	}
	start := time.Now()
	save := testhost.UserCommand(ctx, "podman", "save", base)
	load := asEngine(ctx, eu, "podman", "load", "-q")
	pipe, err := save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	load.Stdin = pipe
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := load.CombinedOutput()
	if werr := save.Wait(); err != nil || werr != nil {
		t.Fatalf("load %s into %s's storage: %v %v: %s", base, engineUser, err, werr, out)
	}
	t.Logf("loaded %s into %s's storage in %v", base, engineUser, time.Since(start).Round(time.Millisecond))
	return base
}

// engineSession lists the engine's aisb containers and volumes of a
// session (gate, probe, sandbox, project copy).
func engineSession(t *testing.T, ctx context.Context, eu *user.User) []string {
	t.Helper()
	var left []string
	for _, args := range [][]string{{"ps", "-a", "--format", "{{.Names}}"}, {"volume", "ls", "--format", "{{.Name}}"}} {
		r := testhost.Run(t, asEngine(ctx, eu, append([]string{"podman"}, args...)...))
		if r.Code != 0 {
			t.Fatalf("podman %v as %s: %s", args, engineUser, r)
		}
		for _, n := range strings.Fields(r.Stdout) {
			if strings.HasPrefix(n, "aisb-") {
				left = append(left, n)
			}
		}
	}
	return left
}

// noneLeft fails when a session's container or volume is left on the engine.
func noneLeft(t *testing.T, ctx context.Context, eu *user.User) {
	t.Helper()
	if left := engineSession(t, ctx, eu); len(left) > 0 {
		t.Errorf("left on %s's engine after the session: %v", engineUser, left)
	}
}
