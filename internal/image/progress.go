package image

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/aisb-dev/aisb/internal/termsafe"
)

// Output is where image builds report, and how. A build's own output (the
// Containerfile's commands, apt, npm) is kept, not shown: on a terminal one
// line says which step runs and for how long; elsewhere one plain line per
// step. The whole log is shown when the build fails, or as it comes with
// Verbose. Everything shown from it is made printable.
type Output struct {
	W        io.Writer // normally stderr; nil: nothing is shown
	Terminal bool      // W is a terminal: one line, updated in place
	Verbose  bool      // the build's whole log as it comes
}

// logLimit bounds the log kept for a failure: its end, where the error is.
const logLimit = 1 << 20

// stepLine is buildah's line for each Containerfile instruction, e.g.
// "STEP 2/5: RUN apt-get update" or, in a multi-stage build, "[1/2] STEP 1/3: FROM x".
var stepLine = regexp.MustCompile(`^(\[[0-9]+/[0-9]+\] )?STEP [0-9]+/[0-9]+: `)

// progress receives one build's output (it is the build's io.Writer) and
// reports it through an Output.
type progress struct {
	out         Output
	doing, done string // "building aisb-gate", "built aisb-gate"
	// isStep says whether a line of the output starts a new step.
	isStep func(line string) bool
	now    func() time.Time
	width  int // of the terminal

	mu      sync.Mutex
	start   time.Time
	partial []byte   // the output's last line, not yet ended
	log     [][]byte // the output's lines, printable
	logSize int
	dropped int    // lines left out at the start to keep logLimit
	step    string // the current step, printable
	drawn   bool   // a status line is on the terminal
	stop    chan struct{}
	stopped chan struct{}
}

func newProgress(out Output, doing, done string, isStep func(string) bool, now func() time.Time) *progress {
	p := &progress{out: out, doing: termsafe.Printable(doing), done: termsafe.Printable(done), isStep: isStep, now: now, width: 80, start: now()}
	if f, ok := out.W.(*os.File); ok && out.Terminal {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 20 {
			p.width = w
		}
	}
	return p
}

// startTicker redraws the terminal's line every interval, so the elapsed
// time moves while a long step prints nothing.
func (p *progress) startTicker(interval time.Duration) {
	if !p.out.Terminal || p.out.Verbose || p.out.W == nil {
		return
	}
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.tick()
			}
		}
	}()
}

// Write takes the build's output; it never fails, so a display problem
// never fails a build.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rest := b
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			p.partial = append(p.partial, rest...)
			break
		}
		line := append(p.partial, rest[:i]...)
		p.partial = nil
		p.line(line)
		rest = rest[i+1:]
	}
	return len(b), nil
}

// line handles one complete line of the output, with p.mu held.
func (p *progress) line(raw []byte) {
	text := termsafe.Printable(strings.TrimSuffix(string(raw), "\r"))
	p.keep(text)
	if p.out.W == nil {
		return
	}
	if p.out.Verbose {
		fmt.Fprintln(p.out.W, text)
		return
	}
	if !p.isStep(text) {
		return
	}
	p.step = text
	if p.out.Terminal {
		p.draw()
	} else {
		fmt.Fprintf(p.out.W, "aisb: %s (%s): %s\n", p.doing, p.elapsed(), cut(text, plainWidth))
	}
}

func (p *progress) keep(text string) {
	p.log = append(p.log, []byte(text))
	p.logSize += len(text) + 1
	for p.logSize > logLimit && len(p.log) > 1 {
		p.logSize -= len(p.log[0]) + 1
		p.log = p.log[1:]
		p.dropped++
	}
}

// elapsed is the time since the build started, to a tenth of a second
// (whole seconds on the terminal's line, which is redrawn each second).
func (p *progress) elapsed() string {
	d := p.now().Sub(p.start)
	if p.out.Terminal && !p.out.Verbose {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// draw puts the status line on the terminal, in place, no wider than it.
func (p *progress) draw() {
	s := fmt.Sprintf("aisb: %s, %s", p.doing, p.elapsed())
	if p.step != "" {
		s += ": " + p.step
	}
	fmt.Fprintf(p.out.W, "\r\x1b[K%s", cut(s, p.width-1))
	p.drawn = true
}

// tick redraws the line with the time elapsed.
func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out.W != nil && p.out.Terminal && !p.out.Verbose {
		p.draw()
	}
}

// finish ends the report: the status line is replaced by one that says how
// the build ended and, when it failed without Verbose, the log follows.
func (p *progress) finish(err error) {
	if p.stop != nil {
		close(p.stop)
		<-p.stopped
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.partial) > 0 {
		p.line(p.partial)
		p.partial = nil
	}
	if p.out.W == nil {
		return
	}
	if p.drawn {
		io.WriteString(p.out.W, "\r\x1b[K")
	}
	if err == nil {
		fmt.Fprintf(p.out.W, "aisb: %s in %s\n", p.done, p.elapsed())
		return
	}
	if p.out.Verbose {
		fmt.Fprintf(p.out.W, "aisb: %s failed after %s (its log is above)\n", p.doing, p.elapsed())
		return
	}
	fmt.Fprintf(p.out.W, "aisb: %s failed after %s; its log:\n", p.doing, p.elapsed())
	if p.dropped > 0 {
		fmt.Fprintf(p.out.W, "    (the first %d lines left out)\n", p.dropped)
	}
	for _, l := range p.log {
		fmt.Fprintf(p.out.W, "    %s\n", l)
	}
}

// plainWidth bounds a step's line where it is not on a terminal: a RUN
// step's whole script is in the log.
const plainWidth = 160

// cut shortens printable s to at most n bytes, saying so.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// buildSteps: a build's steps are buildah's STEP lines.
func buildSteps(line string) bool { return stepLine.MatchString(line) }

// everyLine: each line of a pull's output is its progress.
func everyLine(string) bool { return true }
