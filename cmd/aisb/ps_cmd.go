package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/internal/live"
	"github.com/aisb-dev/aisb/internal/termsafe"
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
	list, err := live.Sessions(env.paths.RunningDir())
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
		// Registry files are the user's own, but say what they say safely.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Printable(e.ID), termsafe.Printable(mode), termsafe.Printable(port), termsafe.Printable(e.OwnerPID()),
			e.Started.Local().Format("15:04:05"), termsafe.Printable(allow), termsafe.Printable(e.Project))
	}
	return tw.Flush()
}
