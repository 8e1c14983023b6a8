package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/engine"
	"github.com/aisb-dev/aisb/review"
	"github.com/aisb-dev/aisb/sandbox"
	"github.com/aisb-dev/aisb/state"
)

func reviewCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:      "review",
		Usage:     "see what an agent changed in review mode (aisb run --review), then apply or discard it",
		ArgsUsage: "[SESSION]",
		Description: `Lists what the agent added, modified, deleted and chmodded, with a diff
for text files. Changes that run on the host later (git hooks and config,
.envrc, editor and build files, package manifests, new executable bits,
symlinks) are listed first. SESSION defaults to the newest session not yet
applied or discarded.

--apply refuses, naming the files, when the host changed a file it would
change since the session started; it stages everything, then renames into
place under a journal: if interrupted, --apply again finishes it and
--rollback undoes it. Applied or discarded, the agent's layer is removed.

EXAMPLE:
   aisb run --review --allow api.anthropic.com
   aisb review
   aisb review --apply`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "the changes as JSON, for tools"},
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
		return e.pathsErr
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
	s, err := openReview(e.paths, c.Args().First())
	if err != nil {
		return err
	}
	out := c.App.Writer
	switch {
	case c.Bool("apply"):
		res, err := s.Apply()
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

// openReview opens session id, or the newest open one.
func openReview(paths state.Paths, id string) (*review.Session, error) {
	if id == "" {
		return review.Latest(filepath.Dir(paths.SessionDir("x")), "")
	}
	if !sessionIDPattern.MatchString(id) {
		return nil, exitWith(2, fmt.Errorf("review: session %s: want an id as aisb run printed it, e.g. 20261130-181500-a1b2c3", review.Quote(id)))
	}
	return review.Open(paths.SessionDir(id))
}

// scrubWork removes the overlay work directory a killed session left.
func scrubWork(c *cli.Context, e *appEnv, s *review.Session) {
	if !s.WorkLeft() {
		return
	}
	conn, err := engine.Connect(c.Context, e.where)
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
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(reviewJSON{Session: s.Meta.Session, Project: s.Meta.Project, Git: s.Meta.Git, State: s.Meta.State, Running: s.Running(), Changes: cs})
}

func printApplied(w io.Writer, s *review.Session, res *review.Result, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(map[string]any{
			"session": s.Meta.Session, "project": s.Meta.Project, "applied": len(res.Changes),
			"skipped": res.Skipped, "resumed": res.Resumed,
		})
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
