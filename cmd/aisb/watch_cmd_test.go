package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/live"
)

// lockedBuf is a buffer two goroutines write and the test reads.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// watchRig is a session's live server in ask mode with aisb watch's loop
// attached: the test types lines into in and reads what the user sees.
type watchRig struct {
	t      *testing.T
	s      *live.Server
	helper string
	in     *io.PipeWriter
	out    *lockedBuf
	errs   *lockedBuf
}

func newWatchRig(t *testing.T, askTimeout time.Duration) *watchRig {
	t.Helper()
	dir, err := os.MkdirTemp("", "watch") // short: socket paths have a limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := &watchRig{t: t, helper: filepath.Join(dir, "h.sock"), out: &lockedBuf{}, errs: &lockedBuf{}}
	control := filepath.Join(dir, "c.sock")
	r.s, err = live.Start(live.Options{Session: "s1", Ask: true, AskTimeout: askTimeout, HelperSocket: r.helper, ControlSocket: control,
		Record: func(audit.Event) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.s.Close)
	w, err := live.OpenWatch(control)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	pr, pw := io.Pipe()
	r.in = pw
	t.Cleanup(func() { pw.Close() })
	go askLoop(w, pr, &syncWriter{w: r.out}, r.errs, false)
	return r
}

// request is the gate asking about name; its result arrives on the channel.
func (r *watchRig) request(name string) <-chan bool {
	done := make(chan bool, 1)
	go func() {
		c, err := net.Dial("unix", r.helper)
		if err != nil {
			done <- false
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "%s\n", name)
		line, _ := bufio.NewReader(c).ReadString('\n')
		done <- line == "OK\n"
	}()
	return done
}

// waitFor waits until what the user sees (stdout and stderr) holds want.
func (r *watchRig) waitFor(want string) {
	r.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if strings.Contains(r.out.String()+r.errs.String(), want) {
			return
		}
	}
	r.t.Fatalf("never shown: %q\nstdout:\n%s\nstderr:\n%s", want, r.out.String(), r.errs.String())
}

func (r *watchRig) typeLine(s string) { fmt.Fprintf(r.in, "%s\n", s) }

func (r *watchRig) allowed(name string) bool { return slices.Contains(r.s.Allowlist(), name) }

// TestWatchAnswerBoundToItsQuestion reproduces the swap of issue 27: with a
// short ask_timeout the agent lets the question the user is answering time
// out and asks about another name at once; the user's "s" (typed for the
// first) must not allow the second. Nor does an answer naming a question no
// longer open go anywhere: it is refused, and the user told.
func TestWatchAnswerBoundToItsQuestion(t *testing.T) {
	r := newWatchRig(t, 300*time.Millisecond)

	// The user reads "ASK #1 good.test" and starts typing "s"; before they
	// press Enter, #1 times out and #2 evil.test takes its place.
	good := r.request("good.test")
	r.waitFor("ASK #1  good.test")
	<-good
	r.waitFor("#1  good.test: timeout")
	evil := r.request("evil.test")
	r.waitFor("ASK #2  evil.test")
	r.typeLine("s")
	if ok := <-evil; ok || r.allowed("evil.test") {
		t.Fatalf("an answer typed for #1 admitted evil.test (allowlist %v)\nstdout:\n%s\nstderr:\n%s", r.s.Allowlist(), r.out.String(), r.errs.String())
	}
	r.waitFor("not applied")
	r.waitFor("#2  evil.test: timeout")

	// An answer naming a question that is no longer open: refused and said.
	r.typeLine("s 2")
	r.waitFor("#2 is no longer open")
	if r.allowed("evil.test") || r.allowed("good.test") {
		t.Fatalf("an answer to a closed question was applied: allowlist %v", r.s.Allowlist())
	}

	// Control: the one question on screen, answered without its number.
	fine := r.request("fine.test")
	r.waitFor("ASK #3  fine.test")
	r.typeLine("s")
	if ok := <-fine; !ok || !r.allowed("fine.test") {
		t.Fatalf("the question on screen, answered: admitted %v, allowlist %v\nstderr:\n%s", ok, r.s.Allowlist(), r.errs.String())
	}
	// Control: by its number, with another question open beside it.
	a, b := r.request("a.test"), r.request("b.test")
	r.waitFor("ASK #4")
	r.waitFor("ASK #5")
	id := 4
	if strings.Contains(r.out.String(), "ASK #5  a.test") {
		id = 5
	}
	r.typeLine(fmt.Sprintf("o %d", id))
	if ok := <-a; !ok {
		t.Errorf("o %d (a.test) not admitted\nstdout:\n%s\nstderr:\n%s", id, r.out.String(), r.errs.String())
	}
	if ok := <-b; ok {
		t.Errorf("b.test admitted by an answer to a.test")
	}
}

// TestAskBoardBinding: where an answer without a number goes, step by step.
func TestAskBoardBinding(t *testing.T) {
	b := newAskBoard(&syncWriter{w: io.Discard}, io.Discard, false)
	prompt := func(id int, host string) { b.show(live.Message{Type: live.MsgPrompt, Prompt: id, Host: host}) }
	resolved := func(id int) { b.show(live.Message{Type: live.MsgResolved, Prompt: id, Answer: live.AnswerTimeout}) }
	expect := func(what string, numbered bool, n, want int) {
		t.Helper()
		id, why := b.bind(numbered, n)
		if id != want {
			t.Errorf("%s: bound to #%d (%s), want #%d", what, id, why, want)
		}
		b.lineDone(id)
	}
	expect("nothing asked", false, 0, 0)
	prompt(1, "one.test")
	expect("the one question shown", false, 0, 1)
	resolved(1)
	prompt(2, "two.test")
	prompt(3, "three.test")
	expect("two open", false, 0, 0)
	expect("two open, by number", true, 3, 3)
	resolved(3)
	// #2 alone open when that line was read: on screen for the next.
	expect("the one left open", false, 0, 2)
	resolved(2)
	prompt(4, "four.test")
	expect("one shown after the last answer", false, 0, 4)
	resolved(4)
	prompt(5, "five.test")
	b.lineDone(0) // a line that answered nothing: #5 was on screen
	resolved(5)
	prompt(6, "six.test")
	expect("#5 ended and #6 came while the line was typed", false, 0, 0)
	expect("retyped with #6 on screen", false, 0, 6)
	resolved(6)
	expect("ended, by number", true, 6, 0)
	expect("never shown", true, 99, 0)
}
