package main

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

func configCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "check configuration files",
		Subcommands: []*cli.Command{{
			Name:      "check",
			Usage:     "validate a configuration file, or the user's and this project's files",
			ArgsUsage: "[FILE]",
			Description: `Exit 0 when valid; otherwise exit 78 with one line per problem, each naming
the file, the field and the fix. Without FILE it checks the user's file
($XDG_CONFIG_HOME/aisb/config.toml) and this directory's .aisb.toml, and says
what of an untrusted project file would be ignored.

EXAMPLE:
   aisb config check ~/.config/aisb/config.toml
   aisb config check`,
			Flags:  []cli.Flag{projectFlag()},
			Action: func(c *cli.Context) error { return configCheck(c, e) },
		}},
	}
}

func configCheck(c *cli.Context, e *appEnv) error {
	stdout := c.App.Writer
	if c.NArg() > 1 {
		return exitWith(2, errors.New("config check takes at most one FILE"))
	}
	if file := c.Args().First(); file != "" {
		if _, err := config.ReadFile(file); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return exitWith(config.ExitConfig, fmt.Errorf("%s: no such file; give the path of a configuration file", termsafe.Name(file)))
			}
			return exitWith(config.ExitConfig, err)
		}
		fmt.Fprintf(stdout, "%s: ok\n", termsafe.Name(file))
		return nil
	}
	r, src, err := resolveConfig(c, e, resolve{project: true, harness: true}, config.Overrides{})
	if err != nil {
		return err
	}
	if _, err := config.ReadFile(src.UserFile); err == nil {
		fmt.Fprintf(stdout, "%s: ok\n", termsafe.Name(src.UserFile))
	}
	if r.ProjectFile != nil {
		fmt.Fprintf(stdout, "%s: ok\n", termsafe.Name(r.ProjectFile.Name))
	}
	fmt.Fprintf(stdout, "effective: mode %s, %d allowed hosts (%d of them the %s harness's), %d host ports, %d variables passed\n",
		r.Config.Network.Mode, len(r.Allowlist), len(r.HarnessHosts), r.Config.Sandbox.Harness, len(r.Config.Network.HostPorts), len(r.Config.Env.Pass)+len(r.Config.Env.Set))
	for _, h := range r.Allowlist {
		from := ""
		if slices.Contains(r.HarnessHosts, h) {
			from = "  (harness)"
		}
		fmt.Fprintf(stdout, "  allow %s%s\n", h, from)
	}
	for _, k := range r.Config.Credentials {
		fmt.Fprintf(stdout, "  credential %s: the gate sets %s for %s; the sandbox sees a placeholder\n", k.Env, k.Header, k.Host)
	}
	return nil
}
