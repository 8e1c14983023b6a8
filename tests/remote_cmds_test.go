// remoteCommandChecks: the commands besides `aisb run` on an engine that is
// not local (issue #29 item 4), written once for any such engine:
// TestRemoteEngineRefused runs them on another user's service reached as
// unix://…, and the ssh:// engine's test can run them with its URI. One
// file of about 340 lines: the checks share one engine, one project and the
// images doctor builds first, in that order.

package tests

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// cmdEngine is the engine the checks reach (remoteRun's remoteEngine: its
// URI, aisb's environment for it, and how to act as its user on its host)
// and the base image in its storage.
type cmdEngine struct {
	remoteEngine
	base string
}

// name is the engine's user, for messages.
func (e cmdEngine) name() string { return e.eu.Username }

// podman runs podman as the engine's user on the engine's host: what the
// checks see there, never through aisb.
func (e cmdEngine) podman(ctx context.Context, args ...string) *exec.Cmd {
	return e.as(ctx, e.eu, append([]string{"podman"}, args...)...)
}

// objects are the engine's aisb containers and volumes (the ssh:// test's
// probes, which come and go beside it, left out).
func (e cmdEngine) objects(t *testing.T, ctx context.Context) []string {
	t.Helper()
	var out []string
	for _, args := range [][]string{{"ps", "-a", "--format", "{{.Names}}"}, {"volume", "ls", "--format", "{{.Name}}"}} {
		r := testhost.Run(t, e.podman(ctx, args...))
		if r.Code != 0 {
			t.Fatalf("podman %v as %s: %s", args, e.name(), r)
		}
		for _, n := range strings.Fields(r.Stdout) {
			if strings.HasPrefix(n, "aisb-") && !strings.HasPrefix(n, sshProbePrefix) {
				out = append(out, n)
			}
		}
	}
	return out
}

// remoteCommandChecks runs, with a (a fresh project, its own state) on the
// engine e:
//   - doctor checks that engine: every check passes, it says which engine
//     and that it is not local, the sandbox checks (each with its control,
//     a plain container reaching the same targets) ran there, and a gate
//     started there; nothing of it is left;
//   - image ls lists what the engine's storage holds, and image build finds
//     it up to date there;
//   - state import puts the caller's settings in a volume on the engine
//     (not in the caller's own Podman), ls lists it, export gives them
//     back, rm refuses while an exited sandbox there mounts it (its aisb
//     cannot be judged from here) and removes it after;
//   - gate up starts a long-lived gate on the engine's host (gate status
//     lists it), a session through it (run --gate) reaches the allowed name
//     and is refused the others (the refused name never resolved, a direct
//     connection dropped), and gate down removes it and its follower with
//     both decisions in `aisb audit`.
func remoteCommandChecks(t *testing.T, ctx context.Context, a *aisbUser, e cmdEngine) {
	a.host, a.env = e.uri, e.env
	env := []string{"AISB_TRACE=1"}
	aisb := func(t *testing.T, args ...string) testhost.Result {
		t.Helper()
		start := time.Now()
		r := a.runEnv(t, env, args...)
		t.Logf("aisb %s on %s's engine: exit %d in %v", strings.Join(args, " "), e.name(), r.Code, time.Since(start).Round(time.Millisecond))
		return r
	}
	left := func(t *testing.T, what string) {
		t.Helper()
		if l := e.objects(t, ctx); len(l) > 0 {
			t.Errorf("left on %s's engine after %s: %v", e.name(), what, l)
		}
	}
	notLocal := "trace: engine at " + e.uri + " is not local"

	t.Run("doctor", func(t *testing.T) {
		r := aisb(t, "doctor", "--json")
		got := map[string][]string{}
		dec := json.NewDecoder(strings.NewReader(r.Stdout))
		for {
			var ch struct{ Name, Status, Reason string }
			if err := dec.Decode(&ch); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("doctor --json: %v: %s", err, r)
			}
			got[ch.Name] = append(got[ch.Name], ch.Status+" "+ch.Reason)
			if ch.Status == "FAIL" {
				t.Errorf("doctor on %s's engine: %s FAIL: %s", e.name(), ch.Name, ch.Reason)
			}
		}
		if r.Code != 0 {
			t.Errorf("doctor on %s's engine: exit %d: %s", e.name(), r.Code, r)
		}
		for _, name := range []string{"podman", "network helper", "subordinate ids", "storage driver", "resource limits", "gate", "control",
			"table installed", "gate reachable", "other host ports", "direct UDP and DNS", "raw sockets", "agent vs table", "privileges", "fails closed"} {
			if len(got[name]) == 0 || (name != "resource limits" && !strings.HasPrefix(got[name][0], "PASS")) {
				t.Errorf("doctor on %s's engine: check %q: %q", e.name(), name, got[name])
			}
		}
		if eng := got["engine"]; len(eng) != 1 || !strings.Contains(eng[0], e.uri+" is not local") {
			t.Errorf("doctor does not say it checked %s, not local: %q", e.uri, eng)
		}
		if ids := got["subordinate ids"]; len(ids) != 2 || !strings.Contains(ids[0], "the engine's user namespace maps") {
			t.Errorf("doctor judged this host's subordinate ids, not the engine's: %q", ids)
		}
		if rd := got["runtime dir"]; len(rd) != 0 {
			t.Errorf("doctor checked this host's runtime directory for %s's engine: %q", e.name(), rd)
		}
		if g := got["gate"]; len(g) == 1 {
			t.Logf("doctor: %s", g[0])
		}
		if !strings.Contains(r.Stderr, notLocal) {
			t.Errorf("doctor's trace lacks %q: %s", notLocal, r.Stderr)
		}
		left(t, "doctor")
	})

	t.Run("image", func(t *testing.T) {
		r := aisb(t, "image", "ls", "--json")
		var tags []string
		dec := json.NewDecoder(strings.NewReader(r.Stdout))
		for {
			var img struct{ Tag string }
			if err := dec.Decode(&img); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("image ls --json: %v: %s", err, r)
			}
			tags = append(tags, img.Tag)
		}
		there := testhost.Run(t, e.podman(ctx, "images", "--format", "{{.Repository}}:{{.Tag}}"))
		if r.Code != 0 || len(tags) < 2 || there.Code != 0 {
			t.Fatalf("aisb image ls on %s's engine: %v: %s\nthe engine's images: %s", e.name(), tags, r, there)
		}
		for _, tag := range tags {
			if !slices.Contains(strings.Fields(there.Stdout), tag) {
				t.Errorf("aisb image ls lists %s, which %s's storage lacks: %s", tag, e.name(), there.Stdout)
			}
		}
		b := aisb(t, "image", "build", "--harness", "shell")
		if b.Code != 0 || strings.Count(b.Stdout, "up to date") != 2 || !strings.Contains(b.Stderr, notLocal) {
			t.Errorf("aisb image build --harness shell after doctor built its images on %s's engine: %s", e.name(), b)
		}
	})

	t.Run("state", func(t *testing.T) {
		home, henv := fakeHome(t)
		env := append(env, henv...)
		r := a.runEnv(t, env, "state", "import", "pi")
		_, name, _ := strings.Cut(r.Stderr, "files into ")
		name = strings.TrimSpace(strings.SplitN(name, "\n", 2)[0])
		if r.Code != 0 || !strings.HasPrefix(name, "aisb-state-pi-") {
			t.Fatalf("aisb state import pi on %s's engine (home %s): %s", e.name(), home, r)
		}
		if vols := testhost.Run(t, e.podman(ctx, "volume", "ls", "--format", "{{.Name}}")); !slices.Contains(strings.Fields(vols.Stdout), name) {
			t.Fatalf("the imported volume %s is not on %s's engine: %s", name, e.name(), vols)
		}
		if own := testhost.Podman(t, "volume", "ls", "--format", "{{.Name}}"); slices.Contains(strings.Fields(own.Stdout), name) {
			t.Fatalf("the imported volume %s is in the caller's own Podman", name)
		}
		if ls := a.runEnv(t, env, "state", "ls", "--json"); ls.Code != 0 || !strings.Contains(ls.Stdout, `"name":"`+name+`"`) {
			t.Errorf("aisb state ls on %s's engine does not list %s: %s", e.name(), name, ls)
		}
		tarFile := filepath.Join(testhost.UserDir(t), "state.tar")
		if ex := a.runEnv(t, env, "state", "export", "-o", tarFile, name); ex.Code != 0 {
			t.Errorf("aisb state export on %s's engine: %s", e.name(), ex)
		} else if got := tarFileContent(t, tarFile, ".pi/agent/settings.json"); got != `{"theme":"imported-theme"}` {
			t.Errorf("the exported state's settings.json is %q", got)
		}
		// An exited sandbox there that mounts it: its aisb is no process
		// this host can judge, so rm refuses, naming it, and leaves the
		// volume.
		exited := fmt.Sprintf("aisb-h4exited-%d", time.Now().UnixNano())
		if c := testhost.Run(t, e.podman(ctx, "run", "--name", exited, "--label", "io.aisb.kind=sandbox", "--network", "none", "-v", name+":/x", e.base, "true")); c.Code != 0 {
			t.Fatalf("make an exited sandbox on %s's engine: %s", e.name(), c)
		}
		rm := a.runEnv(t, env, "state", "rm", name)
		if rm.Code == 0 || !strings.Contains(rm.Stderr, "a sandbox still mounts it: the exited sandbox "+exited) || !strings.Contains(rm.Stderr, "podman rm "+exited) {
			t.Errorf("aisb state rm on %s's engine with an exited sandbox mounting the volume: %s", e.name(), rm)
		}
		if vols := testhost.Run(t, e.podman(ctx, "volume", "ls", "--format", "{{.Name}}")); !slices.Contains(strings.Fields(vols.Stdout), name) {
			t.Errorf("the refused state rm removed %s", name)
		}
		testhost.Run(t, e.podman(ctx, "rm", "-f", exited))
		if rm := a.runEnv(t, env, "state", "rm", name); rm.Code != 0 || !strings.Contains(rm.Stderr, "removed state volume "+name) {
			t.Errorf("aisb state rm on %s's engine: %s", e.name(), rm)
		}
		left(t, "state rm")
	})

	t.Run("gate", func(t *testing.T) {
		if r := aisb(t, "gate", "status"); r.Code != 0 || !strings.Contains(r.Stdout, "no gates running") {
			t.Errorf("aisb gate status on %s's engine: %s", e.name(), r)
		}
		// A long-lived gate on the engine's host, a session through it,
		// and its audit complete once it is down. (The upstream is allowed
		// by its address: the names a session's gate allows there are
		// TestRemoteRun's.)
		upstream := testhost.UpstreamAddr
		// Control: the engine's host reaches the upstream without a sandbox.
		if c := testhost.Run(t, e.podman(ctx, "run", "--rm", "--network", "host", e.base, "curl", "-sSk", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "https://"+upstream+"/")); c.Code != 0 || c.Stdout != "200" {
			t.Fatalf("control: a plain container on %s's host network does not reach the upstream: %s", e.name(), c)
		}
		up := aisb(t, "gate", "up", "--allow", upstream, "h4gate")
		t.Cleanup(func() { testhost.Run(t, e.podman(context.Background(), "rm", "-f", "aisb-gate-h4gate")) })
		if up.Code != 0 || !strings.Contains(up.Stdout, "gate h4gate listening on 127.0.0.1:") || !strings.Contains(up.Stdout, "on the engine's host ("+e.uri+", not local)") {
			t.Fatalf("aisb gate up on %s's engine: %s", e.name(), up)
		}
		if ps := testhost.Run(t, e.podman(ctx, "ps", "--format", "{{.Names}}")); !slices.Contains(strings.Fields(ps.Stdout), "aisb-gate-h4gate") {
			t.Fatalf("the long-lived gate does not run on %s's engine: %s", e.name(), ps)
		}
		if st := aisb(t, "gate", "status"); st.Code != 0 || !strings.Contains(st.Stdout, "h4gate") || !strings.Contains(st.Stdout, "long-lived") {
			t.Errorf("aisb gate status with the long-lived gate up on %s's engine: %s", e.name(), st)
		}
		mark := testhost.DNSMark(t)
		r := aisb(t, "run", "--gate", "h4gate", "--harness", "shell", "--", "sh", "-c",
			"curl -sSk --max-time 10 -o /dev/null -w 'allowed=%{http_code}\\n' https://"+upstream+"/; "+
				"curl -sSk --max-time 10 -o /dev/null -w 'refusedname=%{http_connect}\\n' https://cmdsrefused.test/; "+
				"curl -sSk --noproxy '*' --max-time 5 -o /dev/null https://"+upstream+"/; echo direct=$?")
		for _, want := range []string{"allowed=200", "refusedname=403", "direct=7"} {
			if r.Code != 0 || !strings.Contains(r.Stdout, want) {
				t.Errorf("aisb run --gate h4gate on %s's engine: want %q: %s", e.name(), want, r)
			}
		}
		if slices.Contains(testhost.DNSQueries(t, mark), "cmdsrefused.test") {
			t.Errorf("the refused name cmdsrefused.test was resolved")
		}
		// The gate is down at once: what it logged is in the audit all the same.
		start := time.Now()
		down := aisb(t, "gate", "down", "h4gate")
		t.Logf("gate down on %s's engine took %v", e.name(), time.Since(start).Round(time.Millisecond))
		if down.Code != 0 || !strings.Contains(down.Stdout, "gate h4gate removed") {
			t.Errorf("aisb gate down on %s's engine: %s", e.name(), down)
		}
		au := a.run(t, "audit", "--session", "h4gate")
		for _, want := range []string{"ALLOWED  CONNECT " + upstream + ":443  200", "BLOCKED  CONNECT cmdsrefused.test:443  403"} {
			if !strings.Contains(au.Stdout, want) {
				t.Errorf("aisb audit --session h4gate after gate down lacks %q: %s", want, au)
			}
		}
		if pid := findProcess(a.bin, "internal-follow", "h4gate"); pid != 0 {
			t.Errorf("the gate's follower (pid %d) outlived gate down", pid)
		}
		if r := aisb(t, "run", "--gate", "h4gate", "--harness", "shell", "--", "true"); r.Code == 0 || !strings.Contains(r.Stderr, "gate h4gate is not running") {
			t.Errorf("aisb run --gate after gate down: %s", r)
		}
		left(t, "gate down")

		// Fail closed: a long-lived gate that dies under a session stops
		// its sandbox; gate down then removes what is left of it.
		if up := aisb(t, "gate", "up", "--allow", upstream, "h4gate"); up.Code != 0 {
			t.Fatalf("aisb gate up again on %s's engine: %s", e.name(), up)
		}
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer gcancel()
		cmd := a.harness().Command(t, gctx, e.uri, append(slices.Clip(a.env), env...), "run", "--gate", "h4gate", "--harness", "shell", "--", "sleep", "600")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		err := testhost.WaitFor(time.Minute, func() error {
			ps := testhost.Run(t, e.podman(ctx, "ps", "--filter", "label=io.aisb.kind=sandbox", "--format", "{{.Names}}"))
			if strings.TrimSpace(ps.Stdout) == "" {
				return errors.New("no sandbox runs yet")
			}
			return nil
		})
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the session through h4gate never ran on %s's engine: %v\n%s", e.name(), err, out.String())
		}
		time.Sleep(time.Second) // the sandbox's command runs, the watch began
		start = time.Now()
		if k := testhost.Run(t, e.podman(ctx, "kill", "aisb-gate-h4gate")); k.Code != 0 {
			t.Fatalf("kill the long-lived gate as %s: %s", e.name(), k)
		}
		werr := cmd.Wait()
		t.Logf("aisb run --gate ended %v after the long-lived gate was killed on %s's engine: %v", time.Since(start).Round(time.Millisecond), e.name(), werr)
		if werr == nil || !strings.Contains(out.String(), "so it stops the sandbox") {
			t.Errorf("aisb run --gate after its gate was killed: %v\n%s", werr, out.String())
		}
		if down := aisb(t, "gate", "down", "h4gate"); down.Code != 0 {
			t.Errorf("aisb gate down of the killed gate on %s's engine: %s", e.name(), down)
		}
		if pid := findProcess(a.bin, "internal-follow", "h4gate"); pid != 0 {
			t.Errorf("the killed gate's follower (pid %d) outlived gate down", pid)
		}
		left(t, "the killed gate's gate down")
	})
}

// tarFileContent is the content of name in the tar file path ("" if absent).
func tarFileContent(t *testing.T, path, name string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err != nil {
			return ""
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			c, _ := io.ReadAll(tr)
			return string(c)
		}
	}
}
