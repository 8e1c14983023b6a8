package gate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/engine/enginefake"
	"github.com/containers/podman/v5/pkg/specgen"
)

// playedBridge is the fake engine's exec playing the gate's bridge: what
// the test writes as its output goes to the relay, what the relay answers
// comes back on answers.
type playedBridge struct {
	out     *io.PipeWriter
	answers chan string
	argv    chan []string
	ended   chan struct{} // the relay closed the bridge's stdin
}

func playBridge(t *testing.T) (*enginefake.Fake, *playedBridge) {
	t.Helper()
	f := enginefake.New()
	s := specgen.NewSpecGenerator("img", false)
	s.Name = "aisb-gate-x"
	if _, err := f.ContainerCreate(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if err := f.ContainerStart(context.Background(), s.Name); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	b := &playedBridge{out: pw, answers: make(chan string, 16), argv: make(chan []string, 1), ended: make(chan struct{})}
	f.Exec = func(ctx context.Context, name string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
		b.argv <- argv
		go func() {
			sc := bufio.NewScanner(stdin)
			for sc.Scan() {
				b.answers <- sc.Text()
			}
			close(b.ended)
			pw.Close()
		}()
		io.Copy(stdout, pr)
		return 0, nil
	}
	return f, b
}

func (b *playedBridge) say(t *testing.T, line string) {
	t.Helper()
	if _, err := fmt.Fprintf(b.out, "%s\n", line); err != nil {
		t.Fatal(err)
	}
}

func (b *playedBridge) answer(t *testing.T) string {
	t.Helper()
	select {
	case a := <-b.answers:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("no answer from the relay in 5 s")
		return ""
	}
}

type logged struct {
	mu    sync.Mutex
	lines []string
}

func (l *logged) logf(f string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(f, a...))
}

func (l *logged) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestRelay: the bridge runs in the gate through the API; each question it
// relays is asked here and answered OK only when Ask says yes; lines that
// are not questions ask nothing, and stop ends the bridge's stdin quietly.
func TestRelay(t *testing.T) {
	f, b := playBridge(t)
	var mu sync.Mutex
	var asked []string
	ask := func(h string) bool {
		mu.Lock()
		asked = append(asked, h)
		mu.Unlock()
		return h == "yes.test"
	}
	var log logged
	r := startRelay(f, "aisb-gate-x", ask, log.logf)
	if argv := <-b.argv; !slices.Equal(argv, []string{probeProgram, "--bridge", bridgeSocket}) {
		t.Errorf("the bridge's command: %q", argv)
	}
	b.say(t, bridgeReady)
	if err := r.waitReady(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	b.say(t, "Q 1 yes.test")
	if a := b.answer(t); a != "1 OK" {
		t.Errorf("answer %q, want 1 OK", a)
	}
	b.say(t, "Q 2 no.test")
	if a := b.answer(t); a != "2 ERR" {
		t.Errorf("answer %q, want 2 ERR", a)
	}
	// Not questions: nothing is asked, nothing answered.
	for _, bad := range []string{"1 OK", "OK", "Q 3", "Q x yes.test", "Q 03 yes.test", "Q 3 yes.test extra", "Q 3 ye\x01s.test", "Q  3 yes.test", "READY", "Q 3 " + strings.Repeat("a", 301)} {
		b.say(t, bad)
	}
	b.say(t, "Q 4 no2.test")
	if a := b.answer(t); a != "4 ERR" {
		t.Errorf("answer %q, want 4 ERR (the lines before it asked nothing)", a)
	}
	mu.Lock()
	if !slices.Equal(asked, []string{"yes.test", "no.test", "no2.test"}) {
		t.Errorf("asked %q", asked)
	}
	mu.Unlock()
	r.stop()
	select {
	case <-b.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not end the bridge's stdin")
	}
	<-r.done
	if log.String() != "" {
		t.Errorf("a stopped relay said: %s", log.String())
	}
}

// TestRelayOversized: a line from the bridge over any question's length
// ends the relay (the bridge's stdin closes, so it refuses everything),
// and the user is told the question path ended.
func TestRelayOversized(t *testing.T) {
	f, b := playBridge(t)
	var log logged
	r := startRelay(f, "aisb-gate-x", func(string) bool { t.Error("asked"); return true }, log.logf)
	<-b.argv
	b.say(t, bridgeReady)
	if err := r.waitReady(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	go fmt.Fprintf(b.out, "Q 1 %s\n", strings.Repeat("a", maxQuestionLine))
	select {
	case <-b.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("an oversized line did not end the bridge's stdin")
	}
	<-r.done
	if s := log.String(); !strings.Contains(s, "over 400 bytes") || !strings.Contains(s, "refused from now on") {
		t.Errorf("the user was told: %q", s)
	}
}

// TestRelayNotReady: a bridge that fails, or says something else first,
// is an error Open returns (the gate is then removed), never a gate that
// cannot ask.
func TestRelayNotReady(t *testing.T) {
	t.Run("exec fails", func(t *testing.T) {
		f := enginefake.New() // no such container
		r := startRelay(f, "aisb-gate-x", func(string) bool { return true }, nil)
		if err := r.waitReady(5 * time.Second); !errors.Is(err, ErrBridge) {
			t.Errorf("waitReady: %v, want ErrBridge", err)
		}
	})
	t.Run("other first line", func(t *testing.T) {
		f, b := playBridge(t)
		r := startRelay(f, "aisb-gate-x", func(string) bool { return true }, nil)
		<-b.argv
		b.say(t, "Q 1 yes.test")
		if err := r.waitReady(5 * time.Second); !errors.Is(err, ErrBridge) {
			t.Errorf("waitReady: %v, want ErrBridge", err)
		}
		select {
		case a := <-b.answers:
			t.Errorf("answered %q", a)
		case <-time.After(100 * time.Millisecond):
		}
	})
	t.Run("silent", func(t *testing.T) {
		f, b := playBridge(t)
		r := startRelay(f, "aisb-gate-x", func(string) bool { return true }, nil)
		<-b.argv
		if err := r.waitReady(100 * time.Millisecond); !errors.Is(err, ErrBridge) {
			t.Errorf("waitReady: %v, want ErrBridge", err)
		}
		r.stop()
	})
}
