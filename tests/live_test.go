package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/live"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// agentScript runs, step by step, the command the test writes into
// /project/goN, and prints "RN CODE MILLISECONDS OUTPUT" for each; "exit"
// ends it. The test drives the agent from outside while the session runs.
const agentScript = `i=1
while :; do
  while [ ! -e /project/go$i ]; do sleep 0.05; done
  c=$(cat /project/go$i)
  [ "$c" = exit ] && exit 0
  t0=$(date +%s%3N)
  out=$(sh -c "$c" 2>&1); code=$?
  t1=$(date +%s%3N)
  printf 'R%d %d %d %s\n' $i $code $((t1-t0)) "$(printf %s "$out" | tr '\n' ' ' | cut -c1-2000)"
  i=$((i+1))
done
`

// liveSession is an aisb run in the background whose agent follows agentScript.
type liveSession struct {
	t      *testing.T
	a      *aisbUser
	cmd    *exec.Cmd
	lines  chan string
	stderr *lockedWriter
	step   int
	id     string
	done   chan error
	// put drops step n's command where the agent looks (/project/goN)
	// when the project is not this host's directory (a remote engine's
	// copy); nil: written into the project here.
	put func(n int, command string)
}

func startLive(t *testing.T, a *aisbUser, args ...string) *liveSession {
	t.Helper()
	writeUserFile(t, filepath.Join(a.project, "agent.sh"), agentScript)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	// a.env too (an ssh:// engine's key and known_hosts), as a.run passes it.
	cmd := a.harness().Command(t, ctx, a.containerHost(t), a.env, append(append([]string{"run"}, args...), "--harness", "shell", "--", "sh", "/project/agent.sh")...)
	s := &liveSession{t: t, a: a, cmd: cmd, lines: make(chan string, 100), stderr: &lockedWriter{}, done: make(chan error, 1)}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
		s.done <- s.cmd.Wait()
	}()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.end()
		}
	})
	// The session is running once aisb ps lists it.
	deadline := time.Now().Add(10 * time.Minute)
	for s.id == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the session never appeared in aisb ps; stderr: %s", s.stderr)
		}
		select {
		case err := <-s.done:
			t.Fatalf("aisb run ended before it was listed: %v; stderr: %s", err, s.stderr)
		default:
		}
		for _, e := range s.a.ps(t) {
			s.id = e.ID
		}
		time.Sleep(200 * time.Millisecond)
	}
	return s
}

type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// do has the agent run command and returns its exit code, time and output.
func (s *liveSession) do(command string) (code, ms int, out string) {
	s.t.Helper()
	s.step++
	s.write(command)
	prefix := fmt.Sprintf("R%d ", s.step)
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("the session ended before step %d; stderr: %s", s.step, s.stderr)
			}
			rest, found := strings.CutPrefix(l, prefix)
			if !found {
				continue
			}
			f := strings.SplitN(rest, " ", 3)
			code, _ = strconv.Atoi(f[0])
			ms, _ = strconv.Atoi(f[1])
			if len(f) == 3 {
				out = f[2]
			}
			return code, ms, out
		case <-timeout:
			s.t.Fatalf("step %d (%s) did not finish", s.step, command)
		}
	}
}

func (s *liveSession) write(command string) {
	if s.put != nil {
		s.put(s.step, command)
		return
	}
	tmp := filepath.Join(s.a.project, ".go.tmp")
	if err := os.WriteFile(tmp, []byte(command), 0o644); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.a.project, fmt.Sprintf("go%d", s.step))); err != nil {
		s.t.Fatal(err)
	}
}

// end stops the agent and waits for aisb run to exit.
func (s *liveSession) end() error {
	s.step++
	s.write("exit")
	for range s.lines {
	}
	select {
	case err := <-s.done:
		return err
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		return fmt.Errorf("aisb run did not exit")
	}
}

func (a *aisbUser) ps(t *testing.T) []live.Entry {
	t.Helper()
	r := a.run(t, "ps", "--json")
	if r.Code != 0 {
		t.Fatalf("aisb ps: %s", r)
	}
	var out []live.Entry
	dec := json.NewDecoder(strings.NewReader(r.Stdout))
	for {
		var e live.Entry
		if err := dec.Decode(&e); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("aisb ps --json: %v\n%s", err, r.Stdout)
		}
		out = append(out, e)
	}
	return out
}

// viaGate is the agent's request through its gate.
func viaGate(url string) string { return `probe http-proxy "$HTTP_PROXY" ` + url }

// TestLiveAllowDeny: a running session's agent is refused a host; aisb allow
// from outside admits its next request without a restart; aisb deny takes it
// back; an allowed name resolving to an internal address stays refused; all
// of it is in the audit with who did it.
func TestLiveAllowDeny(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, dnsConfig())
	plainControl(t, base, "tcp", testhost.Internal["private"]+":80")
	s := startLive(t, a, "--allow", "allowed.test")

	if code, _, out := s.do(viaGate("http://allowed.test/")); code != 0 {
		t.Fatalf("control: a listed name through the gate: %s", out)
	}
	if code, _, out := s.do(viaGate("http://another.test/")); code == 0 || !strings.Contains(out, "403") {
		t.Fatalf("before aisb allow: another.test: %d %s", code, out)
	}
	r := a.run(t, "allow", "--session", s.id, "--save", "another.test")
	if r.Code != 0 || !strings.Contains(r.Stdout, "allowed another.test in session "+s.id) {
		t.Fatalf("aisb allow: %s", r)
	}
	if code, _, out := s.do(viaGate("http://another.test/")); code != 0 {
		t.Errorf("after aisb allow: another.test refused: %s", out)
	}
	if code, _, out := s.do(viaGate("https://another.test/")); code != 0 {
		t.Errorf("after aisb allow: a tunnel to another.test refused: %s", out)
	}
	// Without the proxy, through the relay: the same live decision.
	noproxy := `env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY curl -sSk --max-time 20 --noproxy '*' -o /dev/null -w 'status %{http_code}' https://another.test/`
	if code, _, out := s.do(noproxy); code != 0 || !strings.Contains(out, "status 200") {
		t.Errorf("after aisb allow: another.test without the proxy: %d %s", code, out)
	}
	ps := a.ps(t)
	if len(ps) != 1 || strings.Join(ps[0].Allowlist, ",") != "allowed.test,another.test" || ps[0].Mode != "allow" || ps[0].GatePort == 0 || ps[0].Project != a.project {
		t.Errorf("aisb ps: %+v", ps)
	}
	if r := a.run(t, "ps"); r.Code != 0 || !strings.Contains(r.Stdout, s.id+"  allow ") || !strings.Contains(r.Stdout, "allowed.test,another.test") || !strings.Contains(r.Stdout, a.project) {
		t.Errorf("aisb ps: %s", r)
	}
	saved, _ := os.ReadFile(filepath.Join(a.config, "aisb", "config.toml"))
	if !strings.Contains(string(saved), `dns = ["`+testhost.UpstreamAddr+`"]`) || !strings.Contains(string(saved), `allowed_hosts = ["another.test"]`) {
		t.Errorf("--save: the user's config is now:\n%s", saved)
	}

	if r := a.run(t, "deny", "another.test"); r.Code != 0 { // the only session: no --session needed
		t.Fatalf("aisb deny: %s", r)
	}
	if code, _, out := s.do(viaGate("http://another.test/")); code == 0 {
		t.Errorf("after aisb deny: another.test admitted: %s", out)
	}
	if code, _, out := s.do(noproxy); code == 0 {
		t.Errorf("after aisb deny: another.test admitted without the proxy: %s", out)
	}
	if r := a.run(t, "deny", "allowed.test"); r.Code == 0 || !strings.Contains(r.Stderr, "listed since the session started") {
		t.Errorf("deny of a start entry: %s", r)
	}
	if r := a.run(t, "allow", "--session", "nosuch", "x.test"); r.Code == 0 || !strings.Contains(r.Stderr, "no running session") {
		t.Errorf("allow in a missing session: %s", r)
	}

	// An address is admitted live when listed exactly (the gate asks about
	// unlisted IP literals too).
	up := testhost.UpstreamAddr
	if code, _, out := s.do(viaGate("http://" + up + "/")); code == 0 || !strings.Contains(out, "403") {
		t.Fatalf("before aisb allow: %s: %d %s", up, code, out)
	}
	if r := a.run(t, "allow", up); r.Code != 0 {
		t.Fatalf("aisb allow %s: %s", up, r)
	}
	if code, _, out := s.do(viaGate("http://" + up + "/")); code != 0 {
		t.Errorf("after aisb allow: %s refused: %s", up, out)
	}

	// Internal addresses stay refused whatever is allowed: a name resolving
	// to one (the control above proves the address reachable without the
	// sandbox), and the address itself, which aisb allow refuses at once.
	if r := a.run(t, "allow", "private.test"); r.Code != 0 {
		t.Fatalf("aisb allow private.test: %s", r)
	}
	if code, _, out := s.do(viaGate("http://private.test/")); code == 0 {
		t.Errorf("an allowed name resolving to an internal address was reached: %s", out)
	}
	private := testhost.Internal["private"]
	if r := a.run(t, "allow", private); r.Code == 0 || !strings.Contains(r.Stderr, "internal addresses stay refused") {
		t.Errorf("aisb allow %s: %s", private, r)
	}
	if code, _, out := s.do(viaGate("http://" + private + "/")); code == 0 {
		t.Errorf("%s reached after aisb allow was refused: %s", private, out)
	}
	human := a.run(t, "audit", "--session", s.id)
	if !strings.Contains(human.Stdout, "POLICY   allow another.test  by uid ") || !strings.Contains(human.Stdout, "(aisb deny)") {
		t.Errorf("aisb audit does not show the changes and who made them:\n%s", human.Stdout)
	}
	if err := s.end(); err != nil {
		t.Errorf("aisb run: %v; stderr: %s", err, s.stderr)
	}
	if ps := a.ps(t); len(ps) != 0 {
		t.Errorf("aisb ps after the session: %+v", ps)
	}

	var changes, requests []string
	uid := testUID(t)
	for _, e := range a.events(t) {
		switch {
		case e.Event == audit.EventPolicyChange:
			if e.By == nil || e.By.UID != uid || e.By.PID == 0 {
				t.Errorf("policy_change without who: %+v", e)
			}
			changes = append(changes, e.Action+" "+e.Host)
		case e.Host == "another.test" || e.Host == "private.test" || e.Host == up || e.Host == private:
			requests = append(requests, e.Rule+" "+e.Host)
		}
	}
	// Two sequences: the gate's lines reach the audit up to 100 ms later.
	if got, want := strings.Join(changes, ","), "allow another.test,deny another.test,allow "+up+",allow private.test"; got != want {
		t.Errorf("audit policy changes:\n got %s\nwant %s", got, want)
	}
	if got, want := strings.Join(requests, ","), "not_listed another.test,allowed another.test,allowed another.test,allowed another.test,not_listed another.test,not_listed another.test,ip_literal "+up+",allowed "+up+",internal private.test,ip_literal "+private; got != want {
		t.Errorf("audit requests:\n got %s\nwant %s", got, want)
	}
}

func testUID(t *testing.T) int {
	r := testhost.Run(t, testhost.UserCommand(context.Background(), "id", "-u"))
	uid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if err != nil {
		t.Fatal(r)
	}
	return uid
}

// watcher is aisb watch --json in the background: the test reads its
// questions and answers them on its stdin.
type watcher struct {
	t    *testing.T
	cmd  *exec.Cmd
	in   io.WriteCloser
	msgs chan map[string]any
}

func startWatch(t *testing.T, a *aisbUser, id string) *watcher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	w := &watcher{t: t, msgs: make(chan map[string]any, 100)}
	w.cmd = testhost.UserCommand(ctx, a.command(t, ctx, "watch", "--session", id, "--json")...)
	w.cmd.Dir = a.project
	var err error
	if w.in, err = w.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, _ := w.cmd.StdoutPipe()
	errPipe, _ := w.cmd.StderrPipe()
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.in.Close(); w.cmd.Process.Kill(); w.cmd.Wait() })
	attached := make(chan bool, 1)
	stderr := &lockedWriter{}
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			fmt.Fprintln(stderr, sc.Text())
			if strings.Contains(sc.Text(), "watching session") {
				attached <- true
			}
		}
		close(attached)
	}()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["type"] != "request" {
				w.msgs <- m
			}
		}
		close(w.msgs)
	}()
	select {
	case ok := <-attached:
		if !ok {
			t.Fatalf("aisb watch did not attach: %s", stderr)
		}
	case <-time.After(time.Minute):
		t.Fatalf("aisb watch did not attach within a minute: %s", stderr)
	}
	return w
}

// next returns the next question or resolution, or nil after wait.
func (w *watcher) next(wait time.Duration) map[string]any {
	select {
	case m := <-w.msgs:
		return m
	case <-time.After(wait):
		return nil
	}
}

// TestLiveAsk: in ask mode a request for an unlisted name waits for aisb
// watch: an answer admits it, no answer refuses it after the timeout, no
// watcher refuses it at once, and a listed name is never asked about.
func TestLiveAsk(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, dnsConfig()+"ask = true\nask_timeout = 2\n")
	// Nothing could hold a request without a gate of the session's own.
	if r := a.run(t, "run", "--net", "no-gate", "--harness", "shell", "--", "true"); r.Code == 0 || !strings.Contains(r.Stderr, "needs the session's own gate") {
		t.Errorf("ask mode without a gate: %s", r)
	}
	s := startLive(t, a, "--allow", "allowed.test")
	if ps := a.ps(t); len(ps) != 1 || !ps[0].Ask {
		t.Fatalf("aisb ps: %+v", ps)
	}
	// Nobody watching: refused at once, not after the timeout.
	if code, ms, out := s.do(viaGate("http://another.test/")); code == 0 || ms > 1500 {
		t.Errorf("no watcher: code %d after %d ms: %s", code, ms, out)
	}

	w := startWatch(t, a, s.id)
	type result struct {
		code, ms int
		out      string
	}
	ask := func(url, answer string) result {
		t.Helper()
		res := make(chan result, 1)
		go func() { c, ms, out := s.do(viaGate(url)); res <- result{c, ms, out} }()
		m := w.next(time.Minute)
		if m == nil || m["type"] != "prompt" {
			t.Fatalf("no question for %s: %v", url, m)
		}
		if answer != "" {
			fmt.Fprintf(w.in, "%s %v\n", answer, m["prompt"])
		}
		if m := w.next(time.Minute); m == nil || m["type"] != "resolved" {
			t.Fatalf("question not resolved: %v", m)
		}
		return <-res
	}
	if r := ask("http://another.test/", "o"); r.code != 0 {
		t.Errorf("allowed once: %+v", r)
	}
	if r := ask("http://another.test/", ""); r.code == 0 || r.ms < 1900 {
		t.Errorf("unanswered: %+v", r)
	}
	if r := ask("http://another.test/", "d"); r.code == 0 {
		t.Errorf("denied: %+v", r)
	}
	if r := ask("http://unnamed.test/", "s"); r.code != 0 {
		t.Errorf("allowed for the session: %+v", r)
	}
	// Neither the name allowed for the session nor a listed one is asked about.
	for _, url := range []string{"http://unnamed.test/", "http://allowed.test/"} {
		if code, _, out := s.do(viaGate(url)); code != 0 {
			t.Errorf("%s: %s", url, out)
		}
		if m := w.next(300 * time.Millisecond); m != nil {
			t.Errorf("%s was asked about: %v", url, m)
		}
	}
	// A listed name never waits on the helper: while a question is open
	// (and the helper busy with it), a listed name passes at once.
	code, _, out := s.do(`probe http-proxy "$HTTP_PROXY" http://waiting.test/ >/dev/null 2>&1 & bg=$!; sleep 0.5
t0=$(date +%s%3N); probe http-proxy "$HTTP_PROXY" http://allowed.test/ >/dev/null; c=$?; t1=$(date +%s%3N)
echo "listed=$c ms=$((t1-t0))"; wait $bg; echo "waiting=$?"`)
	if m := w.next(time.Minute); m == nil || m["type"] != "prompt" || m["host"] != "waiting.test" {
		t.Errorf("no question open during the listed request: %v", m)
	} else if m := w.next(time.Minute); m == nil || m["answer"] != "timeout" {
		t.Errorf("the open question did not time out: %v", m)
	}
	listedMS := -1
	if _, after, ok := strings.Cut(out, "ms="); ok {
		fmt.Sscanf(after, "%d", &listedMS)
	}
	if code != 0 || !strings.Contains(out, "listed=0 ") || !strings.Contains(out, "waiting=1") || listedMS < 0 || listedMS > 1000 {
		t.Errorf("a listed name while a question was open (ask_timeout 2 s): %d %q", code, out)
	}
	t.Logf("a listed name while a question was open: %d ms", listedMS)
	if err := s.end(); err != nil {
		t.Errorf("aisb run: %v; stderr: %s", err, s.stderr)
	}
	var asks []string
	for _, e := range a.events(t) {
		if e.Event == audit.EventAsk || e.Event == audit.EventPolicyChange {
			asks = append(asks, e.Event+":"+e.Action+":"+e.Host)
		}
	}
	want := "ask:no_watcher:another.test,ask:once:another.test,ask:timeout:another.test,ask:deny:another.test,ask:session:unnamed.test,policy_change:allow:unnamed.test,ask:timeout:waiting.test"
	if got := strings.Join(asks, ","); got != want {
		t.Errorf("audit:\n got %s\nwant %s", got, want)
	}
	// The agent's terminal is never written to by asking.
	for _, name := range []string{"another.test", "unnamed.test", "waiting.test"} {
		if strings.Contains(s.stderr.String(), name) {
			t.Errorf("aisb run's stderr (the agent's terminal) mentions %s: %s", name, s.stderr)
		}
	}
}

// TestLiveAgentCannotSteer: while a question about its request is open and
// a watcher is attached, the agent tries everything it can reach — the
// gate's port, the project directory, its environment, the paths where the
// session's sockets live on the host — to answer it or widen its allowlist.
// Nothing works: its request is refused at the timeout, nothing changed.
func TestLiveAgentCannotSteer(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, dnsConfig()+"ask = true\nask_timeout = 3\n")
	s := startLive(t, a, "--allow", "allowed.test")
	w := startWatch(t, a, s.id)
	regDir := filepath.Join(a.state, "aisb", "running")
	control := filepath.Join(regDir, s.id+".sock")
	helper := filepath.Join(a.state, "aisb", "sessions", s.id, "ask", "helper.sock")
	answer := `{"op":"answer","prompt":1,"answer":"session"}`
	allow := `{"op":"allow","host":"another.test"}`
	attack := strings.Join([]string{
		// The request that waits for an answer.
		`probe http-proxy "$HTTP_PROXY" http://another.test/ >/dev/null 2>&1 & bg=$!`,
		`sleep 0.5`,
		`gate=${HTTP_PROXY##*@}; ghost=${gate%:*}; gport=${gate#*:}`,
		// The project directory: a project file that would allow it.
		`printf 'version = 1\n[network]\nask = false\nallowed_hosts = ["another.test"]\n' > /project/.aisb.toml; echo "A project=$?"`,
		// The host paths where the session reads decisions.
		`mkdir -p ` + regDir + ` && printf '%s\n' '` + answer + `' > ` + control + `; echo "A control=$?"`,
		`printf '%s\n' '` + allow + `' > ` + helper + ` 2>/dev/null; echo "A helper=$?"`,
		// Impersonating aisb watch (and a second client of the helper's
		// socket) at the paths where the sockets are on the host.
		`curl -s -o /dev/null --max-time 3 --unix-socket ` + control + ` -d '{"op":"watch"}' http://x/; echo "A watch=rc$?"`,
		`curl -s -o /dev/null --max-time 3 --unix-socket ` + helper + ` -d 'another.test' http://x/; echo "A helpersock=rc$?"`,
		`echo "A sockets=$(find / -xdev -type s 2>/dev/null | tr '\n' ' ')"`,
		`echo "A env=$(env | grep -c -e AISB -e '\.sock' -e XDG_)"`,
		// Crafted requests to the gate.
		`echo "A header=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -x "$HTTP_PROXY" -H 'X-Aisb-Answer: session' -H 'X-Aisb-Prompt: 1' http://allowed.test/)"`,
		`echo "A origin=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://$gate/aisb/answer?prompt=1&answer=session")"`,
		`echo "A connect=$(curl -s -o /dev/null -w '%{http_connect}' --max-time 5 -p -x "$HTTP_PROXY" https://control.sock/)"`,
		`echo "A rawconnect=$(bash -c 'exec 3<>/dev/tcp/'$ghost'/'$gport'; printf "CONNECT ` + control + ` HTTP/1.1\r\nHost: x\r\n\r\n%s\n" '"'"'` + answer + `'"'"' >&3; head -c 12 <&3')"`,
		`echo "A newline=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -x "$HTTP_PROXY" 'http://another.test%0aOK/')"`,
		`echo "A ok=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -x "$HTTP_PROXY" 'http://OK/')"`,
		`wait $bg; echo "ASKED=$?"`,
	}, "\n")
	code, ms, out := s.do(attack)
	t.Logf("agent (%d ms): %s", ms, out)
	if !strings.Contains(out, "ASKED=1") || code != 0 {
		t.Errorf("the waiting request was admitted, or the attack did not run: %d %s", code, out)
	}
	for _, want := range []string{"A project=0", "A env=0", "A header=200", "A connect=403", "A ok=403", "A watch=rc", "A helpersock=rc"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in the agent's output", want)
		}
	}
	for _, refused := range []string{"A origin=200", "A rawconnect=HTTP/1.1 200", "A newline=200", "A watch=rc0 ", "A helpersock=rc0 "} {
		if strings.Contains(out, refused) {
			t.Errorf("the gate admitted %q", refused)
		}
	}
	// What find saw (the shell's own errors may name the paths it tried).
	if _, after, ok := strings.Cut(out, "A sockets="); ok {
		seen, _, _ := strings.Cut(after, " A env=")
		if strings.Contains(seen, ".sock") {
			t.Errorf("a session socket is visible in the sandbox: %s", seen)
		}
	} else {
		t.Error("the agent did not look for sockets")
	}
	// The question ended by the timeout, not by an answer.
	var resolved []string
	for m := w.next(time.Second); m != nil; m = w.next(time.Second) {
		if m["type"] == "resolved" {
			resolved = append(resolved, fmt.Sprint(m["host"], ":", m["answer"]))
		}
	}
	if !strings.Contains(strings.Join(resolved, ","), "another.test:timeout") {
		t.Errorf("questions resolved: %v", resolved)
	}
	if ps := a.ps(t); len(ps) != 1 || strings.Join(ps[0].Allowlist, ",") != "allowed.test" {
		t.Errorf("the allowlist changed: %+v", ps)
	}
	if fi, err := os.Lstat(control); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("the control socket on the host: %v %v", fi, err)
	}
	if code, _, _ := s.do(viaGate("http://another.test/")); code == 0 {
		t.Error("another.test admitted after the attack")
	}
	if err := s.end(); err != nil {
		t.Errorf("aisb run: %v; stderr: %s", err, s.stderr)
	}
	for _, e := range a.events(t) {
		if e.Event == audit.EventPolicyChange || (e.Event == audit.EventAsk && e.Action != "timeout" && e.Action != "no_watcher") {
			t.Errorf("the agent changed something: %+v", e)
		}
	}
}
