package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/live"
)

// changeCommand is aisb allow or aisb deny: a running session's allowlist,
// changed live through its control socket.
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
	h, err := allowlist.ParseHost(c.Args().First())
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
func steerable(env *appEnv, id string) (live.Entry, error) {
	if env.pathsErr != nil {
		return live.Entry{}, env.pathsErr
	}
	e, err := live.FindSession(env.paths.RunningDir(), id)
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
