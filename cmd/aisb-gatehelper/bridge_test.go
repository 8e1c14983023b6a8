package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// bridgeRun is a bridge on a socket of the test's, aisb's end of it as
// pipes: lines reads what it relays, answer writes to it.
type bridgeRun struct {
	t     *testing.T
	sock  string
	in    *io.PipeWriter
	lines chan string
	code  chan int
}

func startBridge(t *testing.T) *bridgeRun {
	t.Helper()
	b := &bridgeRun{t: t, sock: filepath.Join(t.TempDir(), "helper.sock"), lines: make(chan string, 16), code: make(chan int, 1)}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	b.in = inW
	go func() { b.code <- bridge(b.sock, inR, outW); outW.Close() }()
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
		close(b.lines)
	}()
	t.Cleanup(func() { inW.Close() })
	if l := b.next(); l != bridgeReady {
		t.Fatalf("the bridge's first line: %q, want %q", l, bridgeReady)
	}
	return b
}

func (b *bridgeRun) next() string {
	b.t.Helper()
	select {
	case l := <-b.lines:
		return l
	case <-time.After(5 * time.Second):
		b.t.Fatal("the bridge said nothing in 5 s")
		return ""
	}
}

// question asks name as squid's helper does; the answer comes on the channel.
func (b *bridgeRun) question(name string) chan string {
	res := make(chan string, 1)
	go func() { res <- ask(b.sock, name) }()
	return res
}

func (b *bridgeRun) answer(line string) {
	b.t.Helper()
	if _, err := fmt.Fprintf(b.in, "%s\n", line); err != nil {
		b.t.Fatal(err)
	}
}

func wantAnswer(t *testing.T, res chan string, want string) {
	t.Helper()
	select {
	case got := <-res:
		if got != want {
			t.Errorf("helper's answer %s, want %s", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("no answer in 5 s, want %s", want)
	}
}

func wantOpen(t *testing.T, res chan string) {
	t.Helper()
	select {
	case got := <-res:
		t.Errorf("the question was answered %s; want it still open", got)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestBridge: each question squid's helper asks is relayed as one line and
// answered OK only by aisb's "ID OK" for it while it is open; anything
// else aisb writes answers nothing, and the end of aisb's side refuses
// every open question and every later one.
func TestBridge(t *testing.T) {
	b := startBridge(t)
	q := b.question("yes.test")
	if l := b.next(); l != "Q 1 yes.test" {
		t.Fatalf("relayed %q", l)
	}
	b.answer("1 OK")
	wantAnswer(t, q, "OK")

	q = b.question("no.test")
	if l := b.next(); l != "Q 2 no.test" {
		t.Fatalf("relayed %q", l)
	}
	b.answer("2 ERR")
	wantAnswer(t, q, "ERR")

	// An answer for a question not open yet, then lines that name none:
	// the next question (which gets that number) is not answered by them.
	b.answer("3 OK")
	q = b.question("later.test")
	if l := b.next(); l != "Q 3 later.test" {
		t.Fatalf("relayed %q", l)
	}
	for _, bad := range []string{"1 OK", "3 OK extra", "3 ok", "x OK", "-3 OK", "3", "OK", "3  OKAY", "\x003 OK"} {
		b.answer(bad)
	}
	wantOpen(t, q)
	b.answer("3 ERR")
	wantAnswer(t, q, "ERR")
	// Answered once: a second answer changes nothing, a new one is new.
	b.answer("3 OK")
	q = b.question("again.test")
	if l := b.next(); l != "Q 4 again.test" {
		t.Fatalf("relayed %q", l)
	}
	wantOpen(t, q)

	// What is not a host is refused without a question.
	for _, raw := range []string{"a b\n", "-\n", "\n", strings.Repeat("a", 301) + "\n", "caf\xc3\xa9.test\n"} {
		c, err := net.Dial("unix", b.sock)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(raw))
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if line != "ERR\n" {
			t.Errorf("%q: answered %q", raw, line)
		}
	}

	// aisb's side ends (a dead exec): the open question is refused, the
	// bridge exits and nothing listens any more.
	b.in.Close()
	wantAnswer(t, q, "ERR")
	select {
	case code := <-b.code:
		if code != 0 {
			t.Errorf("exit %d at the end of stdin", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the bridge did not exit at the end of stdin")
	}
	wantAnswer(t, b.question("after.test"), "ERR")
	for l := range b.lines {
		t.Errorf("relayed after its end: %q", l)
	}
}

// TestBridgeOversized: a line from aisb longer than any answer ends the
// bridge (exit 1): its open questions and every later one are refused.
func TestBridgeOversized(t *testing.T) {
	b := startBridge(t)
	q := b.question("open.test")
	if l := b.next(); l != "Q 1 open.test" {
		t.Fatalf("relayed %q", l)
	}
	go fmt.Fprintf(b.in, "1 OK%s\n", strings.Repeat(" ", maxAnswerLine))
	wantAnswer(t, q, "ERR")
	select {
	case code := <-b.code:
		if code != 1 {
			t.Errorf("exit %d after an oversized line, want 1", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the bridge did not end on an oversized line")
	}
	wantAnswer(t, b.question("after.test"), "ERR")
}

// TestBridgeHangUp: a question whose helper hung up is dropped: its late
// answer answers nothing else.
func TestBridgeHangUp(t *testing.T) {
	b := startBridge(t)
	c, err := net.Dial("unix", b.sock)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("gone.test\n"))
	if l := b.next(); l != "Q 1 gone.test" {
		t.Fatalf("relayed %q", l)
	}
	c.Close()
	time.Sleep(100 * time.Millisecond)
	b.answer("1 OK")
	q := b.question("next.test")
	if l := b.next(); l != "Q 2 next.test" {
		t.Fatalf("relayed %q", l)
	}
	wantOpen(t, q)
	b.answer("2 OK")
	wantAnswer(t, q, "OK")
}
