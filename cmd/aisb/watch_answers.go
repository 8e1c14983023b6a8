package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aisb-dev/aisb/internal/live"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

// askBoard is what aisb watch has shown of a session's questions; it binds
// each answer the user types to the question it was typed for. A question
// is known by its number, which the session never reuses. An answer without
// a number goes to the one question that was on screen while the line was
// typed: the agent can let the question being answered time out and ask
// about another name at once (with a short ask_timeout), so an answer whose
// line saw the questions change is refused, never passed to another.
type askBoard struct {
	out    *syncWriter
	errw   io.Writer
	asJSON bool

	mu    sync.Mutex
	hosts map[int]string // every question shown, by number
	open  map[int]bool   // shown and not ended
	ended map[int]string // how each ended question ended
	// onScreen is the one question open when the user's previous line was
	// read besides the one that line answered (0: none, or several); shown
	// is every question shown since that line.
	onScreen int
	shown    []int
}

func newAskBoard(out *syncWriter, errw io.Writer, asJSON bool) *askBoard {
	return &askBoard{out: out, errw: errw, asJSON: asJSON, hosts: map[int]string{}, open: map[int]bool{}, ended: map[int]string{}}
}

// show records a message from the session and shows it, under the board's
// lock: an answer is bound only to what the user could have seen.
func (b *askBoard) show(m live.Message) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch m.Type {
	case live.MsgPrompt:
		b.hosts[m.Prompt] = m.Host
		b.open[m.Prompt] = true
		b.shown = append(b.shown, m.Prompt)
	case live.MsgResolved:
		delete(b.open, m.Prompt)
		b.ended[m.Prompt] = m.Answer
	}
	if b.asJSON {
		b.out.json(m)
	}
	switch {
	case m.Type == live.MsgNotOpen:
		// Said on stderr with --json too: the user typed that answer.
		fmt.Fprintf(b.errw, "aisb: question #%d %s had ended before your answer %s reached the session; it was not applied\n",
			m.Prompt, b.hosts[m.Prompt], termsafe.Printable(m.Answer))
	case b.asJSON:
	case m.Type == live.MsgPrompt:
		b.out.printf("ASK #%d  %s  allow once: o %d   for the session: s %d   deny: d %d   (refused in %ds)\n",
			m.Prompt, m.Host, m.Prompt, m.Prompt, m.Prompt, int(time.Until(m.Deadline).Round(time.Second).Seconds()))
	case m.Type == live.MsgResolved:
		b.out.printf("#%d  %s: %s\n", m.Prompt, m.Host, m.Answer)
	}
}

// bind is the question a line's answer goes to, or 0 and why it goes
// nowhere. numbered says whether the line named one (n).
func (b *askBoard) bind(numbered bool, n int) (int, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := n
	if !numbered {
		switch {
		case len(b.shown) == 0:
			id = b.onScreen
		case len(b.shown) == 1 && b.onScreen == 0:
			id = b.shown[0]
		default:
			return 0, "the questions changed while you typed (" + b.openListLocked() + "); your answer was not applied: answer again with the question's number"
		}
		if id == 0 {
			if len(b.open) == 0 {
				return 0, "no open question"
			}
			return 0, "answer with the question's number (" + b.openListLocked() + ")"
		}
	}
	host, ok := b.hosts[id]
	switch {
	case !ok:
		return 0, fmt.Sprintf("no question #%d was shown here", id)
	case !b.open[id]:
		return 0, fmt.Sprintf("question #%d is no longer open (%s: %s); your answer was not applied", id, host, b.ended[id])
	case !numbered && len(b.open) > 1:
		return 0, fmt.Sprintf("%d questions are open (%s); answer with the question's number", len(b.open), b.openListLocked())
	}
	return id, ""
}

// lineDone starts the next line: what is on screen now is what it is typed
// for. answered is the question the line answered (0: none).
func (b *askBoard) lineDone(answered int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shown = nil
	b.onScreen = 0
	var others []int
	for id := range b.open {
		if id != answered {
			others = append(others, id)
		}
	}
	if len(others) == 1 {
		b.onScreen = others[0]
	}
}

func (b *askBoard) openListLocked() string {
	if len(b.open) == 0 {
		return "none is open"
	}
	var ids []int
	for id := range b.open {
		ids = append(ids, id)
	}
	var s []string
	slices.Sort(ids)
	for _, id := range ids {
		s = append(s, fmt.Sprintf("#%d %s", id, b.hosts[id]))
	}
	return "open: " + strings.Join(s, ", ")
}

// readAnswers turns the user's lines into answers, each sent for the
// question it is bound to.
func (b *askBoard) readAnswers(in io.Reader, w *live.Watch) {
	sc := bufio.NewScanner(in)
	answers := map[string]string{"o": live.AnswerOnce, "s": live.AnswerSession, "d": live.AnswerDeny}
	for sc.Scan() {
		id, err := b.answerLine(sc.Text(), answers, w)
		b.lineDone(id)
		if err != nil {
			return
		}
	}
}

// answerLine handles one line; it returns the question answered and a
// failure to send (the session has ended).
func (b *askBoard) answerLine(line string, answers map[string]string, w *live.Watch) (int, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return 0, nil
	}
	answer, ok := answers[f[0]]
	if !ok || len(f) > 2 {
		fmt.Fprintln(b.errw, "aisb: answer with o, s or d, and the question's number")
		return 0, nil
	}
	n := 0
	if len(f) == 2 {
		var err error
		n, err = strconv.Atoi(f[1])
		if err != nil || n < 1 {
			fmt.Fprintf(b.errw, "aisb: %s is not a question's number; write it as shown after ASK #\n", termsafe.Quote(f[1]))
			return 0, nil
		}
	}
	id, why := b.bind(len(f) == 2, n)
	if id == 0 {
		fmt.Fprintf(b.errw, "aisb: %s\n", why)
		return 0, nil
	}
	return id, w.Answer(id, answer)
}
