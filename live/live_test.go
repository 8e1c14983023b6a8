package live

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/allowlist"
	"github.com/aisb-dev/aisb/gate"
)

// lockedBuffer is an audit; with fail set, it cannot record.
type lockedBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	fail bool
}

var errDiskFull = errors.New("no space left on device")

func (l *lockedBuffer) record(e gate.Event) error {
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

func (l *lockedBuffer) events(t *testing.T) []gate.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []gate.Event
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var e gate.Event
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
	audit := &lockedBuffer{}
	helper, control := filepath.Join(dir, "helper.sock"), filepath.Join(dir, "control.sock")
	s, err := Start(Options{Session: "s1", Start: hosts, Ask: ask, AskTimeout: timeout, HelperSocket: helper, ControlSocket: control, Record: audit.record})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, audit, helper, control
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
	s, audit, helper, control := start(t, false, 0, "listed.test")
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
	for _, e := range audit.events(t) {
		if e.Event == gate.EventPolicyChange {
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
	_, audit, helper, control := start(t, true, 500*time.Millisecond, "listed.test")
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
	for _, e := range audit.events(t) {
		got = append(got, e.Event+":"+e.Action)
	}
	want := "ask:no_watcher,ask:once,ask:deny,ask:timeout,ask:session,policy_change:allow"
	if strings.Join(got, ",") != want {
		t.Errorf("audit %v, want %s", got, want)
	}
}

// TestUnrecordedChangeRefused: a change or an admitting answer the audit
// cannot record does not happen.
func TestUnrecordedChangeRefused(t *testing.T) {
	s, audit, helper, control := start(t, true, 5*time.Second)
	audit.setFail(true)
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
	audit.setFail(false)
	if _, err := Change(control, OpAllow, "new.test"); err != nil {
		t.Errorf("allow once the audit works again: %v", err)
	}
}
