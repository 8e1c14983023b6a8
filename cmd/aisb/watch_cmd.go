package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/live"
	"github.com/aisb-dev/aisb/internal/tail"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

func watchCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:  "watch",
		Usage: "watch a running session's requests and answer its questions (ask mode)",
		Description: `Shows the session's requests as its gate decides them. In ask mode
(aisb run --ask, or network.ask = true) a request for a name the allowlist does
not hold waits while you are asked here; answer with a line:
   o [N]   allow it once          s [N]   allow it for the session
   d [N]   deny it
(N: the question's number; without it, the oldest open question). Unanswered
within network.ask_timeout (30 s), it is refused. With nobody watching, ask mode
refuses at once. The agent's terminal is never written to.

EXAMPLE:
   aisb run --ask --allow api.anthropic.com      # in one terminal
   aisb watch                                    # in another`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "session", Usage: "the session `ID` (default: the only running one)"},
			&cli.BoolFlag{Name: "json", Usage: "JSON lines: {\"type\":\"request\",\"event\":…}, {\"type\":\"prompt\",…}, {\"type\":\"resolved\",…}"},
		},
		Action: func(c *cli.Context) error { return watchAction(c, e) },
	}
}

func watchAction(c *cli.Context, env *appEnv) error {
	e, err := steerable(env, c.String("session"))
	if err != nil {
		return err
	}
	w, err := live.OpenWatch(e.Control)
	if err != nil {
		return err
	}
	defer w.Close()
	ctx, cancel := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	go func() { <-ctx.Done(); w.Close() }()
	out := &syncWriter{w: c.App.Writer}
	asJSON := c.Bool("json")
	fmt.Fprintf(c.App.ErrWriter, "aisb: watching session %s (allowlist: %s)\n", e.ID, termsafe.Printable(strings.Join(w.Allowlist, ", ")))

	go tail.Follow(ctx, filepath.Join(env.paths.AuditDir(), e.ID+".jsonl"), func(line []byte) error {
		var ev audit.Event
		if json.Unmarshal(line, &ev) != nil || (ev.Event != audit.EventAllowed && ev.Event != audit.EventBlocked) {
			return nil
		}
		if asJSON {
			return out.json(map[string]any{"type": "request", "event": ev})
		}
		return out.do(func(w io.Writer) error { return printEvent(w, ev) })
	})

	var mu sync.Mutex
	var open []int
	go readAnswers(c.App.Reader, c.App.ErrWriter, w, &mu, &open)
	for {
		m, err := w.Next()
		if err != nil {
			fmt.Fprintf(c.App.ErrWriter, "aisb: session %s is over\n", e.ID)
			return nil
		}
		mu.Lock()
		switch m.Type {
		case "prompt":
			open = append(open, m.Prompt)
		case "resolved":
			for i, id := range open {
				if id == m.Prompt {
					open = append(open[:i], open[i+1:]...)
					break
				}
			}
		}
		mu.Unlock()
		if asJSON {
			out.json(m)
			continue
		}
		switch m.Type {
		case "prompt":
			out.printf("ASK #%d  %s  allow once: o %d   for the session: s %d   deny: d %d   (refused in %ds)\n",
				m.Prompt, m.Host, m.Prompt, m.Prompt, m.Prompt, int(time.Until(m.Deadline).Round(time.Second).Seconds()))
		case "resolved":
			out.printf("#%d  %s: %s\n", m.Prompt, m.Host, m.Answer)
		}
	}
}

// readAnswers turns the user's lines into answers.
func readAnswers(in io.Reader, errw io.Writer, w *live.Watch, mu *sync.Mutex, open *[]int) {
	sc := bufio.NewScanner(in)
	answers := map[string]string{"o": live.AnswerOnce, "s": live.AnswerSession, "d": live.AnswerDeny}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		answer, ok := answers[f[0]]
		if !ok || len(f) > 2 {
			fmt.Fprintln(errw, "aisb: answer with o, s or d, and the question's number")
			continue
		}
		id := 0
		if len(f) == 2 {
			n, err := strconv.Atoi(f[1])
			if err != nil || n < 1 {
				fmt.Fprintf(errw, "aisb: %s is not a question's number; write it as shown after ASK #\n", termsafe.Quote(f[1]))
				continue
			}
			id = n
		} else {
			mu.Lock()
			if len(*open) > 0 {
				id = (*open)[0]
			}
			mu.Unlock()
		}
		if id == 0 {
			fmt.Fprintln(errw, "aisb: no open question")
			continue
		}
		if err := w.Answer(id, answer); err != nil {
			return
		}
	}
}

// syncWriter serialises the watch's lines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) do(fn func(io.Writer) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn(s.w)
}

func (s *syncWriter) printf(format string, args ...any) {
	s.do(func(w io.Writer) error { _, err := fmt.Fprintf(w, format, args...); return err })
}

func (s *syncWriter) json(v any) error {
	return s.do(func(w io.Writer) error { return json.NewEncoder(w).Encode(v) })
}
