// TestRemoteLive and its checks, in one file of about 370 lines: the live
// and the state checks share the engine's podman and the agent's driver.
// They take the engine as a parameter, so that any engine's test can run
// them (another user's service here; the ssh:// engine's test can call
// liveChecks and stateChecks with its own CONTAINER_HOST and podman).

package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// liveNames are the upstream's names a run of liveChecks owns
// (tests/host/upstream.sh): the listed one, the one allowed live, the one
// asked about and answered, and the one asked about and never answered (so
// never resolved). Each engine's test has its own: they run side by side,
// and the DNS log is one.
type liveNames struct{ listed, live, ask, refused string }

// unixLive are TestRemoteLive's names (TestRemoteRunSSH has its own).
var unixLive = liveNames{listed: "remotelisted.test", live: "remotelive.test", ask: "remoteask.test", refused: "liverefused.test"}

// enginePodman runs the podman CLI as the user whose engine a session runs
// on, against that engine's storage: how a test reaches into a sandbox
// there (the agent's next step) and lists what is left.
type enginePodman func(ctx context.Context, args ...string) *exec.Cmd

// TestRemoteLive (issue #29, item 4): a session on another unprivileged
// user's rootless Podman (CONTAINER_HOST=unix://…) is steered live as a
// local one is: a name not listed is refused and never resolved, `aisb
// allow` admits it at once and `aisb deny` takes it back (the changes and
// the requests in the caller's audit), and with the gate's bridge killed
// (a dead exec) a name allowed again is refused; in ask mode a question
// answered through `aisb watch` admits its name, one not answered is
// refused at the timeout. The gate's questions cross the engine's API (the bridge);
// nothing is mounted. And a state volume (`--state`, on by default for a
// harness with state) lives on the engine: what the agent writes in it in
// one session is there in the next. Controls: the upstream serves the
// names from the engine's host without a sandbox, a listed name passes in
// the same session, and the caller's own engine has no such volume.
// AISB_LIVE_LOCAL=1 also runs the live checks on the caller's own service,
// to compare the cost of a question.
func TestRemoteLive(t *testing.T) {
	parallel(t)
	lockEngine(t, engineUser)
	began := time.Now()
	eu, err := user.Lookup(engineUser)
	if err != nil {
		testhost.Skip(t, "engine user %s missing (run tests/host/setup.sh): %v", engineUser, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base := engineBaseImage(t, eu, asEngine)
	sock := startEngineService(t, eu)
	podman := func(ctx context.Context, args ...string) *exec.Cmd {
		return asEngine(ctx, eu, append([]string{"podman"}, args...)...)
	}
	// Control: the upstream serves the test's names on the engine's host
	// (pinned to its address: no name is resolved for it).
	for _, name := range []string{unixLive.live, unixLive.ask, unixLive.refused} {
		r := testhost.Run(t, asEngine(ctx, eu, "curl", "-sSk", "--max-time", "10", "--resolve", name+":443:"+testhost.UpstreamAddr,
			"-o", "/dev/null", "-w", "%{http_code}", "https://"+name+"/"))
		if r.Code != 0 || r.Stdout != "200" {
			t.Fatalf("control: the upstream does not serve %s to %s: %s", name, engineUser, r)
		}
	}
	t.Run("live", func(t *testing.T) {
		a := newAisb(t, base, dnsConfig()+"ask_timeout = 2\n")
		a.host = "unix://" + sock
		cost := liveChecks(t, a, podman, unixLive)
		t.Logf("on %s's engine: %s", engineUser, cost)
		noneLeft(t, engineSession(t, ctx, eu, asEngine))
		if os.Getenv("AISB_LIVE_LOCAL") == "1" {
			l := newAisb(t, testBaseImage(t), dnsConfig()+"ask_timeout = 2\n")
			local := func(ctx context.Context, args ...string) *exec.Cmd {
				return testhost.UserCommand(ctx, append([]string{"podman"}, args...)...)
			}
			t.Logf("on the caller's own engine: %s", liveChecks(t, l, local, unixLive))
		}
	})
	t.Run("state", func(t *testing.T) {
		// The pi image as the ssh:// engine gets it: built once, on the
		// caller's engine (where other tests build it too), and copied,
		// not a second npm install beside make test's other lanes.
		copyPiImage(t, ctx, base, remoteEngine{eu: eu, as: asEngine})
		a := newAisb(t, base, "")
		a.host = "unix://" + sock
		stateChecks(t, a, podman)
		noneLeft(t, engineSession(t, ctx, eu, asEngine))
	})
	t.Logf("TestRemoteLive's own work: %v", time.Since(began).Round(time.Millisecond))
}

// liveCost is what liveChecks measured of a question to the gate: the
// median time of a request for a live-allowed name (each one asked of aisb)
// and for a listed one (never asked), in the same session.
type liveCost struct{ asked, listed time.Duration }

func (c liveCost) String() string {
	return fmt.Sprintf("a request asked of aisb %v, a listed one %v (medians of 25): a question costs about %v",
		c.asked.Round(100*time.Microsecond), c.listed.Round(100*time.Microsecond), (c.asked - c.listed).Round(100*time.Microsecond))
}

// intoSandbox is a liveSession's put for a sandbox reached through podman:
// the step's command is written into the sandbox's /project.
func intoSandbox(t *testing.T, s *liveSession, podman enginePodman) func(int, string) {
	return func(n int, command string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := podman(ctx, "exec", "-i", "--user", "1000:1000", "aisb-"+s.id, "sh", "-c", fmt.Sprintf("cat > /project/.go.tmp && mv /project/.go.tmp /project/go%d", n))
		cmd.Stdin = strings.NewReader(command)
		out, err := cmd.CombinedOutput()
		if err != nil && command == "exit" {
			// The agent may see the step and exit, and the sandbox
			// stop, before the exec has ended: Podman then kills it (137,
			// seen under make test's load). Whether the step arrived is
			// the session's end, which end() waits for.
			t.Logf("put the exit step %d into the sandbox: %v: %s (the session's end says whether it arrived)", n, err, out)
			return
		}
		if err != nil {
			t.Fatalf("put step %d into the sandbox: %v: %s", n, err, out)
		}
	}
}

// curlCode is the agent's request for https://NAME/ through its gate,
// printing "code=HTTP connect=CONNECT'S t=SECONDS".
func curlCode(name string) string {
	return `curl -sSk --max-time 20 -o /dev/null -w 'code=%{http_code} connect=%{http_connect} t=%{time_total}' https://` + name + `/`
}

// liveChecks runs two sessions on a's engine (a.host, its config with a
// short ask_timeout), the agent driven step by step through podman: live
// allow and deny, then ask mode answered and not answered, with their
// audit on the caller's side. It returns the cost of a question.
func liveChecks(t *testing.T, a *aisbUser, podman enginePodman, n liveNames) liveCost {
	t.Helper()
	start := time.Now()
	mark := testhost.DNSMark(t)
	s := startLive(t, a, "--allow", n.listed)
	s.put = intoSandbox(t, s, podman)
	t.Logf("session %s running after %v", s.id, time.Since(start).Round(time.Millisecond))
	// Control: the listed name passes.
	if code, _, out := s.do(curlCode(n.listed)); code != 0 || !strings.Contains(out, "code=200") {
		t.Fatalf("control: the listed name through the gate: %d %s", code, out)
	}
	if code, ms, out := s.do(curlCode(n.live)); code == 0 || !strings.Contains(out, "connect=403") {
		t.Fatalf("before aisb allow: %s: %d %s", n.live, code, out)
	} else {
		t.Logf("%s refused (the gate's first question) in %d ms", n.live, ms)
	}
	if slices.Contains(testhost.DNSQueries(t, mark), n.live) {
		t.Errorf("the refused %s was resolved", n.live)
	}
	t0 := time.Now()
	if r := a.run(t, "allow", "--session", s.id, n.live); r.Code != 0 || !strings.Contains(r.Stdout, "allowed "+n.live+" in session "+s.id) {
		t.Fatalf("aisb allow %s: %s", n.live, r)
	}
	t.Logf("aisb allow took %v", time.Since(t0).Round(time.Millisecond))
	if code, _, out := s.do(curlCode(n.live)); code != 0 || !strings.Contains(out, "code=200") {
		t.Errorf("after aisb allow: %s: %d %s", n.live, code, out)
	}
	// The cost of a question: a live-allowed name is asked at each request
	// (ttl=0), a listed one never.
	var asked, listed []time.Duration
	_, _, out := s.do(`for i in $(seq 25); do ` + curlCode(n.listed) + `; echo; ` + curlCode(n.live) + `; echo; done`)
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "t="); ok {
			sec, _ := strconv.ParseFloat(v, 64)
			d := time.Duration(sec * float64(time.Second))
			if len(asked) < len(listed) {
				asked = append(asked, d)
			} else {
				listed = append(listed, d)
			}
		}
	}
	if len(asked) != 25 || len(listed) != 25 || !strings.Contains(out, "code=200") || strings.Contains(out, "code=000") {
		t.Errorf("the timed requests: %s", out)
	}
	cost := liveCost{asked: median(asked), listed: median(listed)}
	if r := a.run(t, "deny", n.live); r.Code != 0 {
		t.Fatalf("aisb deny %s: %s", n.live, r)
	}
	if code, _, out := s.do(curlCode(n.live)); code == 0 || !strings.Contains(out, "connect=403") {
		t.Errorf("after aisb deny: %s: %d %s", n.live, code, out)
	}
	if strings.Contains(s.stderr.String(), "question path") {
		t.Errorf("the question path failed: %s", s.stderr)
	}
	if a.host != "" {
		// A gate on an engine named by CONTAINER_HOST: its bridge.
		bridgeKilled(t, a, s, podman, n)
	}
	if err := s.end(); err != nil {
		t.Errorf("aisb run: %v; stderr: %s", err, s.stderr)
	}
	// Two sequences: the gate's lines reach the caller's audit some 100-250
	// ms after the request (its logs come through the API).
	var changes, requests []string
	for _, e := range a.events(t) {
		switch {
		case e.Event == audit.EventPolicyChange:
			changes = append(changes, e.Action+" "+e.Host)
		case e.Host == n.live:
			requests = append(requests, e.Rule)
		}
	}
	wantChanges, wantRequests := "allow "+n.live+",deny "+n.live, "not_listed,allowed,"+strings.Repeat("allowed,", 25)+"not_listed"
	if a.host != "" {
		wantChanges, wantRequests = wantChanges+",allow "+n.live, wantRequests+",not_listed"
	}
	if got, want := strings.Join(changes, ","), wantChanges; got != want {
		t.Errorf("the caller's audit's policy changes:\n got %s\nwant %s", got, want)
	}
	if got, want := strings.Join(requests, ","), wantRequests; got != want {
		t.Errorf("the caller's audit's requests for %s:\n got %s\nwant %s", n.live, got, want)
	}
	au := a.run(t, "audit", "--session", s.id)
	for _, want := range []string{"POLICY   allow " + n.live + "  by uid ", "ALLOWED  CONNECT " + n.live + ":443  200", "BLOCKED  CONNECT " + n.live + ":443  403"} {
		if !strings.Contains(au.Stdout, want) {
			t.Errorf("aisb audit lacks %q:\n%s", want, au.Stdout)
		}
	}

	// Ask mode: the question goes to aisb watch through the same path. A
	// local engine's project is this host's directory: the first
	// session's steps are still there.
	steps, _ := filepath.Glob(filepath.Join(a.project, "go[0-9]*"))
	for _, f := range steps {
		os.Remove(f)
	}
	start = time.Now()
	mark = testhost.DNSMark(t)
	s = startLive(t, a, "--ask", "--allow", n.listed)
	s.put = intoSandbox(t, s, podman)
	w := startWatch(t, a, s.id)
	t.Logf("ask session %s watched after %v", s.id, time.Since(start).Round(time.Millisecond))
	ask := func(name, answer string) (int, int, string) {
		t.Helper()
		type result struct {
			code, ms int
			out      string
		}
		res := make(chan result, 1)
		go func() { c, ms, out := s.do(curlCode(name)); res <- result{c, ms, out} }()
		m := w.next(time.Minute)
		if m == nil || m["type"] != "prompt" || m["host"] != name {
			t.Fatalf("no question for %s: %v", name, m)
		}
		if answer != "" {
			fmt.Fprintf(w.in, "%s %v\n", answer, m["prompt"])
		}
		if m := w.next(time.Minute); m == nil || m["type"] != "resolved" {
			t.Fatalf("the question for %s not resolved: %v", name, m)
		}
		r := <-res
		return r.code, r.ms, r.out
	}
	if code, ms, out := ask(n.ask, "o"); code != 0 || !strings.Contains(out, "code=200") {
		t.Errorf("answered yes once: %s: %d %s", n.ask, code, out)
	} else {
		t.Logf("%s admitted by the watcher's answer in %d ms", n.ask, ms)
	}
	if code, ms, out := ask(n.refused, ""); code == 0 || !strings.Contains(out, "connect=403") || ms < 1900 {
		t.Errorf("not answered: %s: %d after %d ms: %s", n.refused, code, ms, out)
	}
	if slices.Contains(testhost.DNSQueries(t, mark), n.refused) {
		t.Errorf("the unanswered %s was resolved", n.refused)
	}
	if err := s.end(); err != nil {
		t.Errorf("aisb run --ask: %v; stderr: %s", err, s.stderr)
	}
	var asks []string
	for _, e := range a.events(t) {
		if e.Event == audit.EventAsk && e.Session == s.id {
			asks = append(asks, e.Action+":"+e.Host)
		}
	}
	if want := "once:" + n.ask + ",timeout:" + n.refused; strings.Join(asks, ",") != want {
		t.Errorf("the ask session's audit:\n got %s\nwant %s", strings.Join(asks, ","), want)
	}
	t.Logf("the live checks took %v", time.Since(start).Round(time.Millisecond))
	return cost
}

// bridgeKilled: fail closed with the remote gate's bridge killed (a dead
// exec): the name allowed again is refused, and aisb says so. (The
// pattern is split so that the shell's own command line does not match.)
func bridgeKilled(t *testing.T, a *aisbUser, s *liveSession, podman enginePodman, n liveNames) {
	t.Helper()
	kctx, kcancel := context.WithTimeout(context.Background(), time.Minute)
	defer kcancel()
	if out, err := podman(kctx, "exec", "aisb-gate-"+s.id, "sh", "-c",
		`b=-bridge; for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in *-$b*) kill -9 ${p#/proc/} && echo killed;; esac; done`).CombinedOutput(); err != nil || !strings.Contains(string(out), "killed") {
		t.Fatalf("kill the bridge in the gate: %v: %s", err, out)
	}
	if err := testhost.WaitFor(30*time.Second, func() error {
		if !strings.Contains(s.stderr.String(), "the gate's question path through the API ended") {
			return fmt.Errorf("aisb did not say the question path ended: %s", s.stderr)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if r := a.run(t, "allow", "--session", s.id, n.live); r.Code != 0 {
		t.Fatalf("aisb allow %s again: %s", n.live, r)
	}
	if code, _, out := s.do(curlCode(n.live)); code == 0 || !strings.Contains(out, "connect=403") {
		t.Errorf("allowed, with the bridge dead: %s: %d %s", n.live, code, out)
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// stateChecks runs two sessions of the pi harness (which keeps ~/.pi in a
// state volume of the project's scope) on a's engine: what the agent
// writes in its state in the first is there in the second, and the volume
// is on that engine (podman). The volume is removed at the end.
func stateChecks(t *testing.T, a *aisbUser, podman enginePodman) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	marker := fmt.Sprintf("kept-%d", time.Now().UnixNano())
	r := a.run(t, "run", "--harness", "pi", "--net", "none", "--", "sh", "-c", "test -e ~/.pi/marker && echo HAS || echo NONE; echo "+marker+" > ~/.pi/marker")
	if r.Code != 0 || !strings.Contains(r.Stdout, "NONE") {
		t.Fatalf("first session with state: %s", r)
	}
	t.Logf("first session with state: %v", time.Since(start).Round(time.Millisecond))
	vols := func(cmd *exec.Cmd) []string {
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("podman volume ls: %v", err)
		}
		return slices.DeleteFunc(strings.Fields(string(out)), func(n string) bool { return !strings.HasPrefix(n, "aisb-state-pi-") })
	}
	there := vols(podman(ctx, "volume", "ls", "--format", "{{.Name}}", "--filter", "label=io.aisb.state.project="+a.project))
	t.Cleanup(func() {
		for _, v := range there {
			podman(context.Background(), "volume", "rm", "-f", v).Run()
		}
	})
	if len(there) != 1 {
		t.Fatalf("the project's state volume on the engine: %q", there)
	}
	// Control: it is not on the caller's own engine.
	if here := vols(testhost.UserCommand(ctx, "podman", "volume", "ls", "--format", "{{.Name}}", "--filter", "label=io.aisb.state.project="+a.project)); len(here) != 0 {
		t.Errorf("the state volume is on the caller's own engine too: %q", here)
	}
	t1 := time.Now()
	r = a.run(t, "run", "--harness", "pi", "--net", "none", "--", "cat", "/home/agent/.pi/marker")
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != marker {
		t.Errorf("second session: want the first's %s in ~/.pi/marker: %s", marker, r)
	}
	t.Logf("second session with state: %v", time.Since(t1).Round(time.Millisecond))
	// --fresh: none of it.
	if r = a.run(t, "run", "--harness", "pi", "--net", "none", "--fresh", "--", "sh", "-c", "test -e ~/.pi/marker && echo HAS || echo NONE"); r.Code != 0 || !strings.Contains(r.Stdout, "NONE") {
		t.Errorf("a --fresh session sees the state: %s", r)
	}
	for _, v := range there {
		if out, err := podman(ctx, "volume", "rm", v).CombinedOutput(); err != nil {
			t.Errorf("remove %s on the engine: %v: %s", v, err, out)
		}
	}
	there = nil
	t.Logf("the state checks took %v", time.Since(start).Round(time.Millisecond))
}
