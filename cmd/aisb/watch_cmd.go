package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

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
(N: the question's number; without it, the one question on screen: refused
when several are open or the questions changed while you typed; an answer to
a question that has ended is refused, never applied to another). Unanswered
within network.ask_timeout (30 s), it is refused. With nobody watching, ask mode
refuses at once. The agent's terminal is never written to.

EXAMPLE:
   aisb run --ask --allow api.anthropic.com      # in one terminal
   aisb watch                                    # in another`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "session", Usage: "the session `ID` (default: the only running one)"},
			&cli.BoolFlag{Name: "json", Usage: "JSON lines: {\"type\":\"request\",\"event\":…}, {\"type\":\"prompt\",…}, {\"type\":\"resolved\",…}, {\"type\":\"not_open\",…} (an answer that was not applied)"},
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

	askLoop(w, c.App.Reader, out, c.App.ErrWriter, asJSON)
	fmt.Fprintf(c.App.ErrWriter, "aisb: session %s is over\n", e.ID)
	return nil
}

// askLoop shows the session's questions and sends the user's answers until
// the session ends.
func askLoop(w *live.Watch, in io.Reader, out *syncWriter, errw io.Writer, asJSON bool) {
	b := newAskBoard(out, errw, asJSON)
	go b.readAnswers(in, w)
	for {
		m, err := w.Next()
		if err != nil {
			return
		}
		b.show(m)
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
	return s.do(func(w io.Writer) error { return writeJSON(w, v) })
}
