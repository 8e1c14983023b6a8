package image

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeClock moves only when the test says so.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// fakeBuild is a progress source: what buildah streams for a three-step
// build, with a RUN step whose output carries a terminal escape sequence
// (the output of the build's commands is traffic and file content).
func fakeBuild(t *testing.T, p *progress, clock *fakeClock) {
	t.Helper()
	write := func(s string) {
		if n, err := p.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	write("STEP 1/3: FROM localhost/aisb-base:trixie\n")
	clock.advance(300 * time.Millisecond)
	write("STEP 2/3: RUN apt-get update\n")
	// A line delivered in pieces, as a stream may cut it.
	write("Get:1 http://deb.example trixie InRelease\nReading pack")
	write("age lists...\x1b]0;pwned\x07\r\n")
	clock.advance(5 * time.Second)
	p.tick()
	clock.advance(6 * time.Second)
	p.tick()
	write("STEP 3/3: COPY aisb-entrypoint /usr/local/bin/aisb-entrypoint\n")
	write("--> 0123abcd\nCOMMIT localhost/aisb-x:1234")
	clock.advance(700 * time.Millisecond)
}

func newFake(out Output) (*progress, *fakeClock) {
	clock := &fakeClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	return newProgress(out, "building aisb-x", "built aisb-x", buildSteps, clock.now), clock
}

// TestProgressTerminal: on a terminal, one line updated in place (the step
// and the elapsed time), no build log, and a final line when it is built.
func TestProgressTerminal(t *testing.T) {
	var w bytes.Buffer
	p, clock := newFake(Output{W: &w, Terminal: true})
	fakeBuild(t, p, clock)
	p.finish(nil)
	got := w.String()
	if strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "\r\x1b[Kaisb: built aisb-x in 12s\n") {
		t.Errorf("not one updated line then one final line:\n%q", got)
	}
	for _, want := range []string{
		"\r\x1b[Kaisb: building aisb-x, 0s: STEP 1/3: FROM localhost/aisb-base:trixie",
		"\r\x1b[Kaisb: building aisb-x, 0s: STEP 2/3: RUN apt-get update",
		"\r\x1b[Kaisb: building aisb-x, 5s: STEP 2/3: RUN apt-get update",  // a tick: the time moves
		"\r\x1b[Kaisb: building aisb-x, 11s: STEP 2/3: RUN apt-get update", // and again
		"\r\x1b[Kaisb: building aisb-x, 11s: STEP 3/3: COPY",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%q", want, got)
		}
	}
	for _, not := range []string{"Reading package lists", "Get:1", "COMMIT", "pwned"} {
		if strings.Contains(got, not) {
			t.Errorf("a successful build showed its log (%q):\n%q", not, got)
		}
	}
}

// TestProgressPlain: not on a terminal, one plain line per step: no
// carriage return, no escape sequence, and no build log on success.
func TestProgressPlain(t *testing.T) {
	var w bytes.Buffer
	p, clock := newFake(Output{W: &w})
	fakeBuild(t, p, clock)
	p.finish(nil)
	want := "aisb: building aisb-x (0s): STEP 1/3: FROM localhost/aisb-base:trixie\n" +
		"aisb: building aisb-x (300ms): STEP 2/3: RUN apt-get update\n" +
		"aisb: building aisb-x (11.3s): STEP 3/3: COPY aisb-entrypoint /usr/local/bin/aisb-entrypoint\n" +
		"aisb: built aisb-x in 12s\n"
	if got := w.String(); got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}

// TestProgressFailure: a failed build shows its whole log, printable, on a
// terminal and elsewhere alike.
func TestProgressFailure(t *testing.T) {
	for _, terminal := range []bool{true, false} {
		t.Run(fmt.Sprint("terminal=", terminal), func(t *testing.T) {
			var w bytes.Buffer
			p, clock := newFake(Output{W: &w, Terminal: terminal})
			fakeBuild(t, p, clock)
			p.finish(errors.New("building at STEP 3/3: exit status 1"))
			got := w.String()
			// The log starts after the status line was cleared.
			i := strings.Index(got, "aisb: building aisb-x failed after 12s; its log:\n")
			if i < 0 {
				t.Fatalf("no failure line in\n%q", got)
			}
			log := got[i:]
			for _, want := range []string{
				"    STEP 1/3: FROM localhost/aisb-base:trixie\n",
				"    Get:1 http://deb.example trixie InRelease\n",
				"    Reading package lists...?]0;pwned?\n", // made printable
				"    --> 0123abcd\n",
				"    COMMIT localhost/aisb-x:1234\n", // the last line, without a newline
			} {
				if !strings.Contains(log, want) {
					t.Errorf("log lacks %q:\n%s", want, log)
				}
			}
			if strings.ContainsAny(log, "\x1b\x07\r") {
				t.Errorf("the log reached the terminal unprintable: %q", log)
			}
		})
	}
}

// TestProgressVerbose: --verbose shows the whole log as it comes, printable,
// and no updating line.
func TestProgressVerbose(t *testing.T) {
	var w bytes.Buffer
	p, clock := newFake(Output{W: &w, Terminal: true, Verbose: true})
	fakeBuild(t, p, clock)
	if !strings.Contains(w.String(), "Reading package lists...?]0;pwned?\nSTEP 3/3") {
		t.Errorf("the log was not shown as it came:\n%q", w.String())
	}
	p.finish(errors.New("exit status 1"))
	got := w.String()
	if strings.ContainsAny(got, "\x1b\r") {
		t.Errorf("verbose output has escapes or carriage returns: %q", got)
	}
	if strings.Count(got, "Get:1") != 1 || !strings.HasSuffix(got, "aisb: building aisb-x failed after 12s (its log is above)\n") {
		t.Errorf("verbose failure: the log shown twice, or no end line:\n%q", got)
	}
}

// TestProgressLogLimit: a huge log keeps its end (where the error is) and
// says how much was left out.
func TestProgressLogLimit(t *testing.T) {
	var w bytes.Buffer
	p, _ := newFake(Output{W: &w})
	line := strings.Repeat("x", 1023) + "\n"
	for i := 0; i < 3000; i++ {
		p.Write([]byte(line))
	}
	p.Write([]byte("E: the error at the end\n"))
	p.finish(errors.New("exit status 100"))
	got := w.String()
	if !strings.Contains(got, "    E: the error at the end\n") || !strings.Contains(got, "lines left out)") {
		t.Errorf("the end of a long log is missing, or the cut unsaid:\n%s", got[:200])
	}
	if len(got) > logLimit+64<<10 {
		t.Errorf("log shown: %d bytes, limit %d", len(got), logLimit)
	}
}

// TestProgressWidth: the updated line never wraps (a wrapped line cannot be
// redrawn in place).
func TestProgressWidth(t *testing.T) {
	var w bytes.Buffer
	p, _ := newFake(Output{W: &w, Terminal: true})
	p.Write([]byte("STEP 2/3: RUN " + strings.Repeat("a ", 200) + "\n"))
	for _, l := range strings.Split(w.String(), "\r\x1b[K") {
		if len(l) > p.width-1 {
			t.Errorf("line of %d columns on a terminal of %d: %q", len(l), p.width, l)
		}
	}
}

// TestProgressNoWriter: with nowhere to show it, a build still keeps going.
func TestProgressNoWriter(t *testing.T) {
	p, clock := newFake(Output{})
	fakeBuild(t, p, clock)
	p.finish(errors.New("x"))
}

// TestProgressPlainWidth: a step's plain line is cut (its whole script is in
// the log), and the cut said.
func TestProgressPlainWidth(t *testing.T) {
	var w bytes.Buffer
	p, _ := newFake(Output{W: &w})
	p.Write([]byte("STEP 2/3: RUN " + strings.Repeat("b", 400) + "\n"))
	line := strings.TrimSuffix(w.String(), "\n")
	if !strings.HasSuffix(line, "bbb...") || len(line) > plainWidth+len("aisb: building aisb-x (0s): ") {
		t.Errorf("plain step line of %d bytes: %q", len(line), line)
	}
}
