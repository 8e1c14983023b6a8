package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/review"
	"github.com/aisb-dev/aisb/internal/sandbox"
	"github.com/aisb-dev/aisb/internal/state"
)

func reviewCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:      "review",
		Usage:     "see what an agent changed in review mode (aisb run --review), then apply or discard it",
		ArgsUsage: "[SESSION]",
		Description: `Lists what the agent added, modified, deleted and chmodded, with a diff
for text files. Changes that run on the host later (git hooks and config,
.envrc, editor and build files, package manifests, new executable bits,
symlinks) are listed first. SESSION defaults to the newest session of this
project (the current directory, or -C DIR) not yet applied or discarded;
--apply, --discard and --rollback want SESSION named when the project has
more than one.

--apply refuses, naming the files, when the host changed a file it would
change since the session started; it stages everything, then renames into
place under a journal: if interrupted, --apply again finishes it and
--rollback undoes it. Applied or discarded, the agent's layer is removed.

EXAMPLE:
   aisb run --review --allow api.anthropic.com
   aisb review
   aisb review --apply`,
		Flags: []cli.Flag{
			projectFlag(),
			&cli.BoolFlag{Name: "json", Usage: "the changes as JSON (ASCII only), for tools"},
			&cli.BoolFlag{Name: "stat", Usage: "list the changes without diffs"},
			&cli.BoolFlag{Name: "apply", Usage: "apply the changes to the project"},
			&cli.BoolFlag{Name: "discard", Usage: "drop the changes"},
			&cli.BoolFlag{Name: "rollback", Usage: "undo an interrupted --apply"},
		},
		Action: func(c *cli.Context) error { return reviewAction(c, e) },
	}
}

var sessionIDPattern = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._-]*$`)

func reviewAction(c *cli.Context, e *appEnv) error {
	if e.pathsErr != nil {
		return exitWith(config.ExitConfig, e.pathsErr)
	}
	acts := 0
	for _, f := range []string{"apply", "discard", "rollback"} {
		if c.Bool(f) {
			acts++
		}
	}
	if acts > 1 {
		return exitWith(2, errors.New("review: choose one of --apply, --discard and --rollback"))
	}
	if c.NArg() > 1 {
		return exitWith(2, errors.New("review: one SESSION at most"))
	}
	s, err := openReview(c, e.paths, c.Args().First(), acts > 0)
	if err != nil {
		return err
	}
	out := c.App.Writer
	if why := s.ImportFailure(); why != "" {
		// A remote copy's changes that did not all come back: the layer
		// may hold only part of them, which --apply must not pass off as
		// the agent's work.
		if c.Bool("apply") {
			return fmt.Errorf("review --apply %s: %w: the agent's changes could not all be brought back from the engine's copy (%s); --discard drops what came back", s.Meta.Session, errIncomplete, review.Printable(why))
		}
		e.logf("review: WARNING: session %s's changes could not all be brought back from the engine's copy (%s): what follows may be only part of them", s.Meta.Session, review.Printable(why))
	}
	if c.Bool("apply") || c.Bool("rollback") {
		// A session without --review writes the project directly: it
		// could rewrite a staged file between staging and commit.
		if err := noSessionRunsOn(e.paths, s); err != nil {
			return err
		}
	}
	switch {
	case c.Bool("apply"):
		// A signal stops staging (nothing changed yet); a commit under way
		// is finished rather than cut short.
		ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		defer stop()
		res, err := s.Apply(ctx)
		if err != nil {
			return fmt.Errorf("review --apply %s: %w", s.Meta.Session, err)
		}
		scrubWork(c, e, s)
		return printApplied(out, s, res, c.Bool("json"))
	case c.Bool("discard"):
		if err := s.Discard(); err != nil {
			return err
		}
		scrubWork(c, e, s)
		e.logf("review: discarded session %s; %s is as it was", s.Meta.Session, review.Quote(s.Meta.Project))
		return nil
	case c.Bool("rollback"):
		if err := s.Rollback(); err != nil {
			return err
		}
		e.logf("review: rolled back the interrupted apply of %s; the session is open for review", s.Meta.Session)
		return nil
	}
	cs, err := s.Changes()
	if err != nil {
		return err
	}
	if s.Running() {
		e.logf("review: session %s is still running; this is what it changed so far", s.Meta.Session)
	}
	if c.Bool("json") {
		return writeReviewJSON(out, s, review.Sorted(cs))
	}
	review.Render(out, s, cs, !c.Bool("stat"))
	return nil
}

// openReview opens session id, or the newest open one of the project
// directory; acting on it (apply, discard, rollback) wants the session
// named when the project has several.
func openReview(c *cli.Context, paths state.Paths, id string, acting bool) (*review.Session, error) {
	if id != "" {
		if !sessionIDPattern.MatchString(id) {
			return nil, exitWith(2, fmt.Errorf("review: session %s: want an id as aisb run printed it, e.g. 20261130-181500-a1b2c3", review.Quote(id)))
		}
		return review.Open(paths.SessionDir(id))
	}
	dir, err := projectDir(c)
	if err != nil {
		return nil, err
	}
	open, err := review.OpenSessions(paths.SessionsDir())
	if err != nil {
		return nil, err
	}
	var mine, others []string
	var newest *review.Session
	for _, s := range open {
		if s.Meta.Project != dir {
			others = append(others, s.Meta.Session+" ("+review.Quote(s.Meta.Project)+")")
			continue
		}
		if newest == nil {
			newest = s
		}
		mine = append(mine, s.Meta.Session)
	}
	switch {
	case newest == nil && len(others) > 0:
		return nil, fmt.Errorf("%w for %s; open elsewhere: %s (name one, or use -C DIR)", review.ErrNoSession, review.Quote(dir), strings.Join(others, ", "))
	case newest == nil:
		return nil, fmt.Errorf("%w for %s; start one with aisb run --review", review.ErrNoSession, review.Quote(dir))
	case acting && len(mine) > 1:
		return nil, exitWith(2, fmt.Errorf("review: %s has %d open review sessions (%s): name the one to act on", review.Quote(dir), len(mine), strings.Join(mine, ", ")))
	}
	return newest, nil
}

// errIncomplete is an apply refused because the review's layer may hold
// only part of the agent's changes.
var errIncomplete = errors.New("the review's layer is incomplete")

// errProjectBusy is an apply refused while a session of its project runs.
var errProjectBusy = errors.New("a session of this project is running")

// noSessionRunsOn refuses while another session runs on s's project.
func noSessionRunsOn(paths state.Paths, s *review.Session) error {
	running, err := paths.RunningSessions()
	if err != nil {
		return err
	}
	var ids []string
	for _, r := range running {
		if r.Project == s.Meta.Project && r.ID != s.Meta.Session {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) > 0 {
		return fmt.Errorf("review %s: %w (%s): apply when it has ended", s.Meta.Session, errProjectBusy, strings.Join(ids, ", "))
	}
	return nil
}

// scrubWork removes the overlay work directory a killed session left.
func scrubWork(c *cli.Context, e *appEnv, s *review.Session) {
	if !s.WorkLeft() {
		return
	}
	conn, err := engine.Connect(c.Context, e.local("the overlay work directory a killed session left is on this host, and only a container of this host's Podman can remove its files of a subordinate uid"))
	if err == nil {
		defer conn.Close()
		err = sandbox.Scrub(conn, s.Meta.Image, s.Work(), s.Meta.Session, state.Owner())
	}
	if err == nil {
		err = os.Remove(s.Work())
	}
	if err != nil {
		e.logf("review: the overlay work directory %s is left (it holds files of a subordinate uid; `podman unshare rm -rf` removes it): %v", s.Work(), err)
	}
}

type reviewJSON struct {
	Session string          `json:"session"`
	Project string          `json:"project"`
	Git     string          `json:"git"`
	State   string          `json:"state"`
	Running bool            `json:"running"`
	Changes []review.Change `json:"changes"`
}

func writeReviewJSON(w io.Writer, s *review.Session, cs []review.Change) error {
	if cs == nil {
		cs = []review.Change{}
	}
	return writeASCIIJSON(w, reviewJSON{Session: s.Meta.Session, Project: s.Meta.Project, Git: s.Meta.Git, State: s.Meta.State, Running: s.Running(), Changes: cs}, true)
}

func printApplied(w io.Writer, s *review.Session, res *review.Result, asJSON bool) error {
	if asJSON {
		return writeASCIIJSON(w, map[string]any{
			"session": s.Meta.Session, "project": s.Meta.Project, "applied": len(res.Changes),
			"skipped": res.Skipped, "resumed": res.Resumed,
		}, false)
	}
	if res.Resumed {
		fmt.Fprintf(w, "finished the interrupted apply of session %s to %s\n", s.Meta.Session, review.Quote(s.Meta.Project))
	} else {
		fmt.Fprintf(w, "applied %d change(s) of session %s to %s\n", len(res.Changes), s.Meta.Session, review.Quote(s.Meta.Project))
	}
	for _, p := range res.Skipped {
		fmt.Fprintf(w, "skipped %s: a device, fifo or socket is never applied\n", review.Quote(p))
	}
	return nil
}
