package live

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/netaddr"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// lockedBuffer is an audit; with fail set, it cannot record.
type lockedBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	fail bool
}

var errDiskFull = errors.New("no space left on device")

func (l *lockedBuffer) record(e audit.Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail {
		return errDiskFull
	}
	b, _ := json.Marshal(e)
	l.b.Write(append(b, '\n'))
	return nil
}

func (l *lockedBuffer) setFail(fail bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail = fail
}

func (l *lockedBuffer) events(t *testing.T) []audit.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []audit.Event
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var e audit.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

func start(t *testing.T, ask bool, timeout time.Duration, listed ...string) (*Server, *lockedBuffer, string, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "live")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var hosts []allowlist.Host
	for _, s := range listed {
		h, err := allowlist.ParseHost(s)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
	}
	rec := &lockedBuffer{}
	helper, control := filepath.Join(dir, "helper.sock"), filepath.Join(dir, "control.sock")
	s, err := Start(Options{Session: "s1", Start: hosts, Ask: ask, AskTimeout: timeout, HelperSocket: helper, ControlSocket: control, Record: rec.record})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, rec, helper, control
}

// gateAsks is what the gate's helper does for one request.
func gateAsks(t *testing.T, helper, name string) (bool, time.Duration) {
	t.Helper()
	t0 := time.Now()
	c, err := net.Dial("unix", helper)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s\n", name)
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line == "OK\n", time.Since(t0)
}

func TestAllowDeny(t *testing.T) {
	s, rec, helper, control := start(t, false, 0, "listed.test")
	if ok, _ := gateAsks(t, helper, "new.test"); ok {
		t.Fatal("an unlisted name was admitted before aisb allow")
	}
	rep, err := Change(control, OpAllow, "new.test")
	if err != nil || !rep.Changed || strings.Join(rep.Allowlist, ",") != "listed.test,new.test" {
		t.Fatalf("allow: %+v %v", rep, err)
	}
	if ok, _ := gateAsks(t, helper, "new.test"); !ok {
		t.Error("allowed name refused")
	}
	if ok, _ := gateAsks(t, helper, "sub.new.test"); ok {
		t.Error("a subdomain of an allowed name admitted")
	}
	if rep, err := Change(control, OpAllow, "new.test"); err != nil || rep.Changed {
		t.Errorf("allow again: %+v %v", rep, err)
	}
	if _, err := Change(control, OpAllow, "bad host"); !errors.Is(err, ErrRefused) {
		t.Errorf("a bad host: %v", err)
	}
	if _, err := Change(control, OpDeny, "listed.test"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), ErrStartListed.Error()) {
		t.Errorf("deny of a start entry: %v", err)
	}
	if _, err := Change(control, OpDeny, "new.test"); err != nil {
		t.Fatalf("deny: %v", err)
	}
	if ok, _ := gateAsks(t, helper, "new.test"); ok {
		t.Error("denied name admitted")
	}
	if got := s.Allowlist(); len(got) != 1 {
		t.Errorf("allowlist after deny: %v", got)
	}
	var changes []string
	for _, e := range rec.events(t) {
		if e.Event == audit.EventPolicyChange {
			if e.By == nil || e.By.UID != os.Getuid() || e.By.PID != os.Getpid() {
				t.Errorf("policy_change without its author: %+v", e)
			}
			changes = append(changes, e.Action+" "+e.Host)
		}
	}
	if strings.Join(changes, ",") != "allow new.test,deny new.test" {
		t.Errorf("audit: %v", changes)
	}
}

// TestHelperSocketCannotSteer: whatever the gate's side sends on its socket,
// it only ever gets a yes or no; nothing changes.
func TestHelperSocketCannotSteer(t *testing.T) {
	s, _, helper, _ := start(t, true, time.Second)
	for _, msg := range []string{`{"op":"allow","host":"evil.test"}`, `{"op":"watch"}`, `{"op":"answer","prompt":1,"answer":"session"}`, "evil.test\nOK"} {
		c, err := net.Dial("unix", helper)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "%s\n", msg)
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if line != "ERR\n" {
			t.Errorf("%q on the helper socket: %q", msg, line)
		}
	}
	if got := s.Allowlist(); len(got) != 0 {
		t.Errorf("allowlist changed through the helper socket: %v", got)
	}
}

func TestAsk(t *testing.T) {
	_, rec, helper, control := start(t, true, 500*time.Millisecond, "listed.test")
	// Nobody watching: refused at once.
	if ok, d := gateAsks(t, helper, "asked.test"); ok || d > 100*time.Millisecond {
		t.Errorf("no watcher: ok=%v after %v", ok, d)
	}
	w, err := OpenWatch(control)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	answer := func(want string, reply string) {
		m, err := w.Next()
		if err != nil || m.Type != "prompt" || m.Host != want {
			t.Errorf("prompt: %+v %v", m, err)
			return
		}
		if reply != "" {
			w.Answer(m.Prompt, reply)
		}
		if m, err := w.Next(); err != nil || m.Type != "resolved" {
			t.Errorf("resolved: %+v %v", m, err)
		}
	}
	for _, c := range []struct {
		reply string
		ok    bool
	}{{AnswerOnce, true}, {AnswerDeny, false}, {"", false}, {AnswerSession, true}} {
		done := make(chan bool)
		go func() { ok, _ := gateAsks(t, helper, "asked.test"); done <- ok }()
		answer("asked.test", c.reply)
		if ok := <-done; ok != c.ok {
			t.Errorf("answer %q: admitted=%v", c.reply, ok)
		}
	}
	// Allowed for the session: no more questions.
	if ok, _ := gateAsks(t, helper, "asked.test"); !ok {
		t.Error("a name allowed for the session was refused")
	}
	var got []string
	for _, e := range rec.events(t) {
		got = append(got, e.Event+":"+e.Action)
	}
	want := "ask:no_watcher,ask:once,ask:deny,ask:timeout,ask:session,policy_change:allow"
	if strings.Join(got, ",") != want {
		t.Errorf("audit %v, want %s", got, want)
	}
}

// TestAllowInternalRefused: an address or network the gate refuses whatever
// is allowed is refused by aisb allow at once, with the reason; a name is
// accepted (the gate checks its addresses at each request).
func TestAllowInternalRefused(t *testing.T) {
	s, rec, _, control := start(t, false, 0)
	for _, h := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254", "100.64.0.1", "10.0.0.0/8", "172.16.0.0/16"} {
		_, err := Change(control, OpAllow, h)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), ErrInternal.Error()) {
			t.Errorf("allow %s: %v", h, err)
		}
	}
	// This host's own addresses count as internal too.
	host, err := netaddr.HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range host.Addrs {
		if a.Is4() && !a.IsLoopback() {
			if _, err := Change(control, OpAllow, a.String()); !errors.Is(err, ErrRefused) {
				t.Errorf("allow this host's address %s: %v", a, err)
			}
		}
	}
	// Control: a public address (the test upstream's) and a name pass.
	for _, h := range []string{"198.51.100.10", "private.test"} {
		if _, err := Change(control, OpAllow, h); err != nil {
			t.Errorf("allow %s: %v", h, err)
		}
	}
	if got := strings.Join(s.Allowlist(), ","); got != "198.51.100.10,private.test" {
		t.Errorf("allowlist: %s", got)
	}
	if n := len(rec.events(t)); n != 2 {
		t.Errorf("%d audit events, want the two changes", n)
	}
}

// TestUnrecordedChangeRefused: a change or an admitting answer the audit
// cannot record does not happen.
func TestUnrecordedChangeRefused(t *testing.T) {
	s, rec, helper, control := start(t, true, 5*time.Second)
	rec.setFail(true)
	if _, err := Change(control, OpAllow, "new.test"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), errDiskFull.Error()) {
		t.Errorf("allow with a failing audit: %v", err)
	}
	if got := s.Allowlist(); len(got) != 0 {
		t.Errorf("allowlist changed without a record: %v", got)
	}
	w, err := OpenWatch(control)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	done := make(chan bool)
	go func() { ok, _ := gateAsks(t, helper, "asked.test"); done <- ok }()
	m, err := w.Next()
	if err != nil || m.Type != "prompt" {
		t.Fatalf("prompt: %+v %v", m, err)
	}
	w.Answer(m.Prompt, AnswerSession)
	if m, err := w.Next(); err != nil || m.Answer != AnswerUnrecorded {
		t.Errorf("resolved: %+v %v", m, err)
	}
	if <-done {
		t.Error("an answer the audit could not record admitted the request")
	}
	if got := s.Allowlist(); len(got) != 0 {
		t.Errorf("allowlist changed without a record: %v", got)
	}
	rec.setFail(false)
	if _, err := Change(control, OpAllow, "new.test"); err != nil {
		t.Errorf("allow once the audit works again: %v", err)
	}
}

// TestControlRefusesOtherUsers: the control socket answers only processes
// of the session's own uid, whatever the file modes let through.
func TestControlRefusesOtherUsers(t *testing.T) {
	if os.Getenv("LIVE_TEST_CLIENT") != "" {
		// The child, as another uid: try to allow a name and to watch.
		for _, req := range []string{`{"op":"allow","host":"evil.test"}`, `{"op":"watch"}`} {
			c, err := net.Dial("unix", os.Getenv("LIVE_TEST_CLIENT"))
			if err != nil {
				fmt.Println("dial:", err)
				os.Exit(1)
			}
			fmt.Fprintf(c, "%s\n", req)
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Printf("reply=%q\n", line)
			c.Close()
		}
		os.Exit(0)
	}
	testhost.RequireRoot(t)
	s, rec, _, control := start(t, false, 0)
	// Open the way on purpose: the uid check must hold on its own.
	os.Chmod(filepath.Dir(control), 0o755)
	os.Chmod(control, 0o666)
	// The test binary, where another uid can run it.
	binDir, err := os.MkdirTemp("", "live-client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(binDir) })
	bin := filepath.Join(binDir, "live.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(binDir, 0o755)
	cmd := exec.Command(bin, "-test.run", "^TestControlRefusesOtherUsers$")
	cmd.Env = append(os.Environ(), "LIVE_TEST_CLIENT="+control)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as uid 65534: %v\n%s", err, out)
	}
	// Control: the client reached the socket and was answered with nothing.
	if got := strings.Count(string(out), `reply=""`); got != 2 {
		t.Errorf("another uid was answered:\n%s", out)
	}
	if got := s.Allowlist(); len(got) != 0 {
		t.Errorf("another uid changed the allowlist: %v", got)
	}
	if n := len(rec.events(t)); n != 0 {
		t.Errorf("audit events from another uid: %d", n)
	}
	// And the same request from this uid is answered.
	if _, err := Change(control, OpAllow, "fine.test"); err != nil {
		t.Errorf("own uid: %v", err)
	}
}

// TestAnswerToEndedQuestionRefused: an answer carries the number of the
// question it was given for; once that question has ended (timed out here)
// the answer is not applied to the one asked next, and the watcher is told
// with a not_open message naming the question and the answer.
func TestAnswerToEndedQuestionRefused(t *testing.T) {
	s, _, helper, control := start(t, true, 200*time.Millisecond)
	w, err := OpenWatch(control)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func(typ string) Message {
		t.Helper()
		m, err := w.Next()
		if err != nil || m.Type != typ {
			t.Fatalf("want a %s message: %+v %v", typ, m, err)
		}
		return m
	}
	go func() { gateAsks(t, helper, "first.test") }()
	first := next(MsgPrompt)
	if m := next(MsgResolved); m.Answer != AnswerTimeout {
		t.Fatalf("first question: %+v", m)
	}
	done := make(chan bool, 1)
	go func() { ok, _ := gateAsks(t, helper, "second.test"); done <- ok }()
	second := next(MsgPrompt)
	w.Answer(first.Prompt, AnswerSession)
	if m := next(MsgNotOpen); m.Prompt != first.Prompt || m.Answer != AnswerSession {
		t.Errorf("refusal: %+v, want question %d, answer %s", m, first.Prompt, AnswerSession)
	}
	if m := next(MsgResolved); m.Prompt != second.Prompt || m.Answer != AnswerTimeout {
		t.Errorf("second question: %+v, want it to time out", m)
	}
	if <-done || len(s.Allowlist()) != 0 {
		t.Errorf("an answer to the first question admitted the second: allowlist %v", s.Allowlist())
	}
	// Control: an answer to the open question is applied, and nothing is refused.
	go func() { ok, _ := gateAsks(t, helper, "third.test"); done <- ok }()
	third := next(MsgPrompt)
	w.Answer(third.Prompt, AnswerOnce)
	if m := next(MsgResolved); m.Prompt != third.Prompt || m.Answer != AnswerOnce || !<-done {
		t.Errorf("third question answered once: %+v", m)
	}
}

// TestAskWithoutHelperSocket: a server for a gate on an engine that is not
// local listens on no helper socket; its gate's questions come to Ask,
// which answers as the helper socket does (allowed live: yes; else no, at
// once without ask mode), and no once the server is closed.
func TestAskWithoutHelperSocket(t *testing.T) {
	dir := t.TempDir()
	var aud lockedBuffer
	s, err := Start(Options{Session: "s1", ControlSocket: filepath.Join(dir, "c.sock"), Record: aud.record})
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the server made %v, want the control socket alone", entries)
	}
	if s.Ask("live.test") {
		t.Error("an unlisted name was admitted")
	}
	if _, err := Change(filepath.Join(dir, "c.sock"), OpAllow, "live.test"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"live.test", "LIVE.test."} {
		if !s.Ask(name) {
			t.Errorf("%s refused after aisb allow", name)
		}
	}
	if s.Ask("other.test") || s.Ask("") || s.Ask("live.test extra") {
		t.Error("a name not allowed was admitted")
	}
	s.Close()
	if s.Ask("live.test") {
		t.Error("admitted after the server closed")
	}
}
