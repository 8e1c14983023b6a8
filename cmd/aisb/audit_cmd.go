package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/tail"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

func auditCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "show what the gates allowed and blocked, and how to allow a blocked host",
		Description: `Every request a gate decided is one JSON line under
$XDG_STATE_HOME/aisb/audit/SESSION.jsonl, written while the session runs.

EXAMPLE:
   aisb audit --blocked
   aisb audit --follow
   aisb audit --session 20261129-112913-e70f72 --json`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new events (of the newest session, or --session)"},
			&cli.BoolFlag{Name: "blocked", Usage: "only blocked requests"},
			&cli.StringFlag{Name: "session", Usage: "only session (or long-lived gate) `ID`"},
			&cli.BoolFlag{Name: "json", Usage: "the JSON lines as written"},
		},
		Action: func(c *cli.Context) error { return auditAction(c, e) },
	}
}

func auditAction(c *cli.Context, e *appEnv) error {
	if e.pathsErr != nil {
		return e.pathsErr
	}
	files, err := auditFiles(e.paths.AuditDir(), c.String("session"))
	if err != nil {
		return err
	}
	print := func(line []byte) error {
		var e audit.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil // not ours; the file is append-only JSON lines
		}
		if c.Bool("blocked") && !e.Blocked() && e.Event != audit.EventCapped {
			return nil
		}
		if c.Bool("json") {
			return writeJSONLine(c.App.Writer, line)
		}
		return printEvent(c.App.Writer, e)
	}
	if !c.Bool("follow") {
		// A session that has just ended may still have its last requests
		// added (its watchdog finishes the gate): wait for that a little,
		// and never show an audit that may be incomplete as if it were not.
		deadline := time.Now().Add(auditWait)
		for _, f := range files {
			session := strings.TrimSuffix(filepath.Base(f), ".jsonl")
			switch err := audit.WaitAudit(e.paths.AuditDir(), session, time.Until(deadline)); {
			case errors.Is(err, audit.ErrAuditPending):
				e.logf("audit of session %s: %v: what follows may lack them; run aisb audit again in a moment", session, err)
			case err != nil:
				e.logf("audit of session %s: %v", session, err)
			}
			if err := eachLine(f, print); err != nil {
				return err
			}
		}
		return nil
	}
	if len(files) == 0 {
		return errors.New("audit: no session to follow yet; start one with aisb run")
	}
	ctx, cancel := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	return tail.Follow(ctx, files[len(files)-1], print)
}

// auditWait is how long aisb audit waits for sessions that have just ended
// to have their audit completed; it takes under a second.
const auditWait = 3 * time.Second

// auditFiles lists the audit files, oldest first, or the one of session.
func auditFiles(dir, session string) ([]string, error) {
	if session != "" {
		if strings.ContainsAny(session, "/.") {
			return nil, fmt.Errorf("audit: %q is not a session id", session)
		}
		f := filepath.Join(dir, session+".jsonl")
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("audit: no audit for session %s in %s", session, dir)
		}
		return []string{f}, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	type file struct {
		path string
		mod  time.Time
	}
	var fs []file
	for _, e := range entries {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".jsonl") {
			fs = append(fs, file{filepath.Join(dir, e.Name()), info.ModTime()})
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].mod.Before(fs[j].mod) })
	var out []string
	for _, f := range fs {
		out = append(out, f.path)
	}
	return out, nil
}

func eachLine(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if err := fn(sc.Bytes()); err != nil {
			return err
		}
	}
	return sc.Err()
}

func printEvent(w io.Writer, e audit.Event) error {
	e.Host, e.Method, e.Session, e.Rule = termsafe.Printable(e.Host), termsafe.Printable(e.Method), termsafe.Printable(e.Session), termsafe.Printable(e.Rule)
	if e.Event == audit.EventCapped {
		_, err := fmt.Fprintf(w, "%s  %s  the audit reached its cap of %d bytes (logs.session_max); later requests of this session are not recorded\n",
			e.Time.Local().Format("2006-01-02 15:04:05"), e.Session, e.Bytes)
		return err
	}
	if e.Event == audit.EventPolicyChange || e.Event == audit.EventAsk {
		kind, by := "POLICY", ""
		if e.Event == audit.EventAsk {
			kind = "ASKED"
		}
		if e.By != nil {
			by = fmt.Sprintf("  by uid %d pid %d (%s)", e.By.UID, e.By.PID, termsafe.Printable(e.By.Via))
		}
		_, err := fmt.Fprintf(w, "%s  %s  %-7s  %s %s%s\n", e.Time.Local().Format("2006-01-02 15:04:05"), e.Session, kind, termsafe.Printable(e.Action), e.Host, by)
		return err
	}
	verdict := "ALLOWED"
	if e.Blocked() {
		verdict = "BLOCKED"
	}
	target := e.Host
	if e.Port != 0 {
		target = fmt.Sprintf("%s:%d", e.Host, e.Port)
	}
	rule := e.Rule
	if e.Credential != "" {
		rule += " " + e.Credential // the name of the key the gate set, never its value
	}
	_, err := fmt.Fprintf(w, "%s  %s  %-7s  %s %s  %d  %s\n", e.Time.Local().Format("2006-01-02 15:04:05"), e.Session, verdict, e.Method, target, e.Status, rule)
	if err == nil && e.Blocked() {
		_, err = fmt.Fprintf(w, "    %s\n", audit.Advice(e))
	}
	return err
}
