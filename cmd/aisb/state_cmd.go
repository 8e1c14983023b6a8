package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/statevol"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

func stateCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:  "state",
		Usage: "list, remove, export or import the harness state kept between sandboxes",
		Description: `A harness's settings, login and sessions live in a Podman volume mounted at
its own directories (pi: ~/.pi, Claude Code: ~/.claude, Codex: ~/.codex,
opencode: its XDG directories). sandbox.state (or aisb run --state) chooses
the scope: "project" (default) keeps one volume per harness and project,
"harness" one per harness for every project, "none" (aisb run --fresh) an
empty home every time. The agent can write its volume: after a session that
changed settings files, aisb says so, and aisb state ls shows which.

EXAMPLE:
   aisb state ls
   aisb state import pi
   aisb state export -o pi-state.tar aisb-state-pi-0123456789ab
   aisb state rm aisb-state-pi-0123456789ab`,
		Subcommands: []*cli.Command{
			{
				Name:   "ls",
				Usage:  "list the state volumes",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "one JSON object per volume on stdout"}},
				Action: func(c *cli.Context) error { return stateList(c, e) },
			},
			{
				Name:      "rm",
				Usage:     "remove a state volume: the next session of its scope starts empty",
				ArgsUsage: "NAME",
				Action:    func(c *cli.Context) error { return stateRemove(c, e) },
			},
			{
				Name:      "export",
				Usage:     "write a state volume's content as a tar",
				ArgsUsage: "NAME",
				Flags:     []cli.Flag{&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to `FILE` (default: stdout)"}},
				Action:    func(c *cli.Context) error { return stateExport(c, e) },
			},
			{
				Name:      "import",
				Usage:     "copy your host settings for a harness into this project's state volume",
				ArgsUsage: "HARNESS",
				Description: `Copies the harness's settings files from your home (pi: ~/.pi/agent/settings.json,
models.json, extensions/, ...) into the state volume this directory's sessions
use. Symbolic links, special files and files over 4 MiB are skipped. Credentials
(pi and Codex auth.json, Claude Code .credentials.json and ~/.claude.json,
opencode auth.json) are copied only with --with-credentials: the agent can read
everything in its volume, so a hijacked agent can send them through any host
you allow. Settings files can hold secrets of their own (an apiKey in
opencode.json, an MCP server's token in settings.json or config.toml): read
them first; what import copies, it prints.`,
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "with-credentials", Usage: "also copy the harness's login tokens and keys (the agent can read them)"},
					&cli.StringFlag{Name: "state", Usage: "the scope to import into: project or harness (default: sandbox.state)"},
					projectFlag(),
				},
				Action: func(c *cli.Context) error { return stateImport(c, e) },
			},
		},
	}
}

func stateList(c *cli.Context, e *appEnv) error {
	conn, err := connectAny(c, e)
	if err != nil {
		return err
	}
	defer conn.Close()
	vols, err := statevol.List(conn, e.paths.VolumeDir())
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return encodeEach(c.App.Writer, vols)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHARNESS\tSCOPE\tPROJECT\tSIZE\tLAST USED\tSETTINGS IN LAST SESSION")
	for _, v := range vols {
		used, settings := "never", "-"
		if !v.LastUsed.IsZero() {
			used = v.LastUsed.Local().Format("2006-01-02 15:04")
			settings = "unchanged"
			if len(v.SettingsChanged) > 0 {
				settings = "CHANGED: " + strings.Join(quoteAll(v.SettingsChanged), ", ")
			}
		}
		if v.Unknown {
			used, settings = "unknown", "unknown"
		}
		project := v.Project
		if project == "" {
			project = "(every project)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Name(v.Name), termsafe.Name(v.Harness), termsafe.Name(v.Scope), termsafe.Name(project), humanSize(v.Size), used, settings)
	}
	return tw.Flush()
}

func stateRemove(c *cli.Context, e *appEnv) error {
	name, err := oneArg(c, "NAME", "aisb state rm aisb-state-pi-0123456789ab (see aisb state ls)")
	if err != nil {
		return err
	}
	conn, err := connectAny(c, e)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := statevol.Remove(conn, e.paths.VolumeDir(), name, conn.Locality().Local); err != nil {
		return err
	}
	e.logf("removed state volume %s", name)
	return nil
}

func stateExport(c *cli.Context, e *appEnv) error {
	name, err := oneArg(c, "NAME", "aisb state export -o state.tar aisb-state-pi-0123456789ab (flags before NAME)")
	if err != nil {
		return err
	}
	var w io.Writer = c.App.Writer
	out := c.String("output")
	if out == "" {
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return errors.New("state export: stdout is a terminal; write the tar to a file with -o FILE or a pipe")
		}
	}
	conn, err := connectAny(c, e)
	if err != nil {
		return err
	}
	defer conn.Close()
	if out != "" {
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("state export: %w", err)
		}
		defer f.Close()
		w = f
	}
	img, err := statevol.AnyImage(conn, "")
	if err != nil {
		return err
	}
	if err := statevol.Export(conn, name, img, w); err != nil {
		return err
	}
	if f, ok := w.(*os.File); ok && out != "" {
		return f.Close()
	}
	return nil
}

func stateImport(c *cli.Context, e *appEnv) error {
	name, err := oneArg(c, "HARNESS", "aisb state import pi")
	if err != nil {
		return err
	}
	h, err := harness.Lookup(name)
	if err != nil {
		return exitWith(config.ExitConfig, err)
	}
	if len(h.State.Dirs) == 0 {
		return exitWith(config.ExitConfig, fmt.Errorf("state import %s: %w", h.Name, statevol.ErrNoState))
	}
	r, src, err := resolveConfig(c, e, resolve{project: true}, config.Overrides{Harness: name, State: c.String("state")})
	if err != nil {
		return err
	}
	scope := r.Config.Sandbox.State
	if scope == config.StateNone {
		return exitWith(config.ExitConfig, errors.New("state import: the state scope is \"none\" here, so no volume keeps it; choose one with --state project or --state harness"))
	}
	home := e.home
	if home == "" || !filepath.IsAbs(home) {
		return exitWith(config.ExitConfig, errors.New("state import: $HOME is not set to an absolute path; it is where your harness settings are read from"))
	}
	withCreds := c.Bool("with-credentials")
	if withCreds {
		e.logf("WARNING: --with-credentials: %s's login tokens and keys go into its state volume; the agent can read them and send them to any host the sandbox may reach", h.Name)
	}
	conn, err := connectAny(c, e)
	if err != nil {
		return err
	}
	defer conn.Close()
	img, err := statevol.AnyImage(conn, h.Name)
	if err != nil {
		return err
	}
	res, err := statevol.Import(conn, statevol.Target{Harness: h, Scope: scope, Project: src.ProjectDir}, e.paths.VolumeDir(), home, img, withCreds)
	if err != nil {
		return err
	}
	for _, s := range res.Skipped {
		e.logf("skipped ~/%s: %s", termsafe.Name(s.Path), s.Reason)
	}
	for _, p := range res.Copied {
		fmt.Fprintf(c.App.Writer, "%s\n", termsafe.Name(p))
	}
	e.logf("copied %d files into %s", len(res.Copied), res.Volume)
	return nil
}

func oneArg(c *cli.Context, what, example string) (string, error) {
	if c.NArg() != 1 {
		return "", exitWith(config.ExitConfig, fmt.Errorf("%s: give exactly one %s, e.g. %s", c.Command.HelpName, what, example))
	}
	return c.Args().First(), nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = termsafe.Quote(s)
	}
	return out
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
