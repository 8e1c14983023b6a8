package main

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/config"
)

func trustCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:      "trust",
		Usage:     "let this project's .aisb.toml widen the sandbox, exactly as it is now",
		ArgsUsage: "[DIR]",
		Description: `A project's .aisb.toml is written by whoever wrote the repository, so until
you trust it, it may only narrow what the sandbox can reach. trust records a
hash of its exact content: any later change makes it untrusted again.
Read the file before you trust it.

EXAMPLE:
   cat .aisb.toml && aisb trust`,
		Action: func(c *cli.Context) error {
			dir := c.Args().First()
			if dir == "" {
				var err error
				if dir, err = workDir(); err != nil {
					return err
				}
			}
			if e.pathsErr != nil {
				return exitWith(config.ExitConfig, e.pathsErr)
			}
			f, err := config.Trust(e.paths.TrustStore(), dir)
			if errors.Is(err, fs.ErrNotExist) {
				return exitWith(config.ExitConfig, fmt.Errorf("trust: no %s in %s", config.ProjectFileName, dir))
			}
			if err != nil {
				return exitWith(config.ExitConfig, fmt.Errorf("trust: %w", err))
			}
			fmt.Fprintf(c.App.Writer, "trusted %s as it is now\n", f.Name)
			return nil
		},
	}
}
