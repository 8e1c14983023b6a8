package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/aisb-dev/aisb/config"
)

// run builds the CLI and returns the process exit status. stdout carries the
// command's output (or --json); everything else goes to stderr.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := &cli.App{
		Name:      "aisb",
		Usage:     "run an AI coding agent in a rootless Podman sandbox with an explicit egress allowlist",
		Reader:    stdin,
		Writer:    stdout,
		ErrWriter: stderr,
		Commands: []*cli.Command{
			runCommand(),
			configCommand(),
			trustCommand(),
			gateCommand(),
			imageCommand(),
			doctorCommand(),
			auditCommand(),
			watchdogCommand(),
			followCommand(),
		},
		DisableSliceFlagSeparator: true,
		// Errors are printed once, below, with the exit status they carry.
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.Run(args)
	if err == nil {
		return 0
	}
	// A configuration problem list starts each line with its file already.
	var ps config.Problems
	if errors.Is(err, errSilent) {
		// The command's own exit status; it said what it had to say.
	} else if errors.As(err, &ps) {
		fmt.Fprintln(stderr, ps.Error())
	} else {
		fmt.Fprintf(stderr, "aisb: %v\n", err)
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

// exitError carries an exit status through urfave/cli.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

func exitWith(code int, err error) error { return &exitError{code: code, err: err} }

// resolveConfig merges the user's file, this directory's .aisb.toml (when
// withProject) and the flags, and says on stderr what was ignored. Errors
// carry exit 78. src.ProjectDir is this directory, also without a project file.
func resolveConfig(c *cli.Context, withProject bool, ov config.Overrides) (r *config.Resolved, src config.Sources, err error) {
	dir, err := workDir()
	if err != nil {
		return nil, src, err
	}
	if src, err = config.DefaultSources(dir); err != nil {
		return nil, src, exitWith(config.ExitConfig, err)
	}
	resolveSrc := src
	if !withProject {
		resolveSrc.ProjectDir = ""
	}
	if r, err = config.Resolve(resolveSrc); err != nil {
		return nil, src, exitWith(config.ExitConfig, err)
	}
	for _, n := range r.Notices {
		fmt.Fprintf(c.App.ErrWriter, "aisb: %s\n", n)
	}
	if err := r.Apply(ov); err != nil {
		return nil, src, exitWith(config.ExitConfig, err)
	}
	return r, src, nil
}

func workDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the project directory: %w", err)
	}
	return dir, nil
}
