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
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/allowlist"
	"github.com/aisb-dev/aisb/config"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/tail"
	"github.com/aisb-dev/aisb/live"
	"github.com/aisb-dev/aisb/registry"
)

func psCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:  "ps",
		Usage: "list your running sessions",
		Description: `Each running session: its id, network mode, gate port, the allowlist in
force now (with what was allowed live), when it started, the pid of its aisb
process and its project directory.

EXAMPLE:
   aisb ps
   aisb ps --json`,
		Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per session on stdout"}},
		Action: func(c *cli.Context) error { return psAction(c, e) },
	}
}

func psAction(c *cli.Context, env *appEnv) error {
	if env.pathsErr != nil {
		return env.pathsErr
	}
	list, err := registry.List(env.paths.RunningDir())
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return encodeEach(c.App.Writer, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "aisb: no running sessions")
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tMODE\tGATE\tPID\tSTARTED\tALLOWLIST\tPROJECT")
	for _, e := range list {
		port := "-"
		if e.GatePort != 0 {
			port = strconv.Itoa(e.GatePort)
		}
		if e.Gate != "" {
			port += " (" + e.Gate + ")"
		}
		mode := e.Mode
		if e.Ask {
			mode += ",ask"
		}
		allow := strings.Join(e.Allowlist, ",")
		if allow == "" {
			allow = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", gate.Printable(e.ID), gate.Printable(mode), port, gate.Printable(e.OwnerPID()),
			e.Started.Local().Format("15:04:05"), gate.Printable(allow), gate.Printable(e.Project))
	}
	return tw.Flush()
}

func changeCommand(e *appEnv, op string) *cli.Command {
	cmd := &cli.Command{
		Name:      op,
		ArgsUsage: "HOST",
		Flags:     []cli.Flag{&cli.StringFlag{Name: "session", Usage: "the session `ID` (default: the only running one; see aisb ps)"}},
		Action:    func(c *cli.Context) error { return changeAction(c, e, op) },
	}
	if op == live.OpAllow {
		cmd.Usage = "let a running session reach HOST from now on, without restarting it"
		cmd.Description = `HOST is written as for --allow ("example.com", ".example.com" for the domain
and its subdomains). Internal addresses stay refused whatever is allowed. The
change is an audit event and ends with the session, unless --save also adds
HOST to network.allowed_hosts in your own config file.

EXAMPLE:
   aisb allow packages.example.com
   aisb allow --session 20261130-174200-a1b2c3 --save .files.example.org`
		cmd.Flags = append(cmd.Flags, &cli.BoolFlag{Name: "save", Usage: "also add HOST to network.allowed_hosts in your config file"})
	} else {
		cmd.Usage = "withdraw what aisb allow (or aisb watch) allowed in a running session"
		cmd.Description = `Names the session started with stay: its gate lists them, and reloading
the gate would drop new connections; restart the session without them.

EXAMPLE:
   aisb deny packages.example.com`
	}
	return cmd
}

func changeAction(c *cli.Context, env *appEnv, op string) error {
	if c.NArg() != 1 {
		return exitWith(2, fmt.Errorf("%s: give one HOST", op))
	}
	host := c.Args().First()
	h, err := allowlist.ParseHost(host)
	if err != nil {
		return exitWith(2, fmt.Errorf("%s: %w", op, err))
	}
	e, err := steerable(env, c.String("session"))
	if err != nil {
		return err
	}
	rep, err := live.Change(e.Control, op, h.String())
	if err != nil {
		return fmt.Errorf("%s %s in session %s: %w", op, h, e.ID, err)
	}
	verb := map[string]string{live.OpAllow: "allowed", live.OpDeny: "denied"}[op]
	if rep.Changed {
		fmt.Fprintf(c.App.Writer, "%s %s in session %s\n", verb, h, e.ID)
	} else {
		fmt.Fprintf(c.App.Writer, "%s was already allowed in session %s\n", h, e.ID)
	}
	if c.Bool("save") {
		file := env.paths.UserConfig()
		saved, err := config.SaveAllowedHost(file, h.String())
		if err != nil {
			return err
		}
		if saved {
			env.logf("saved %s to network.allowed_hosts in %s", h, file)
		} else {
			env.logf("%s already allows %s", file, h)
		}
	}
	return nil
}

// steerable finds the session and says why it cannot be steered.
func steerable(env *appEnv, id string) (registry.Entry, error) {
	if env.pathsErr != nil {
		return registry.Entry{}, env.pathsErr
	}
	e, err := registry.Find(env.paths.RunningDir(), id)
	if err != nil {
		return e, err
	}
	if e.Control == "" {
		why := fmt.Sprintf("it runs in network mode %s", e.Mode)
		if e.Gate != "" {
			why = fmt.Sprintf("it uses the long-lived gate %s, whose list is fixed", e.Gate)
		}
		return e, fmt.Errorf("session %s cannot be changed live: %s", e.ID, why)
	}
	return e, nil
}

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
	fmt.Fprintf(c.App.ErrWriter, "aisb: watching session %s (allowlist: %s)\n", e.ID, gate.Printable(strings.Join(w.Allowlist, ", ")))

	go tail.Follow(ctx, filepath.Join(env.paths.AuditDir(), e.ID+".jsonl"), func(line []byte) error {
		var ev gate.Event
		if json.Unmarshal(line, &ev) != nil || (ev.Event != gate.EventAllowed && ev.Event != gate.EventBlocked) {
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
		mu.Lock()
		id := 0
		if len(f) == 2 {
			id, _ = strconv.Atoi(f[1])
		} else if len(*open) > 0 {
			id = (*open)[0]
		}
		mu.Unlock()
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
