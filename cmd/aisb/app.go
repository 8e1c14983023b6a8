package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/state"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

// appEnv is everything aisb takes from its environment, read once at the
// top of run and passed down.
type appEnv struct {
	paths      state.Paths
	pathsErr   error
	where      engine.Where
	home       string // $HOME
	entrypoint string // $AISB_ENTRYPOINT
	gateHelper string // $AISB_GATEHELPER
	trace      bool   // $AISB_TRACE
	stderr     io.Writer
	stderrTTY  bool // stderr is a terminal: builds show one updating line
	logf       func(format string, args ...any)
}

func newAppEnv(getenv func(string) string, stderr io.Writer) *appEnv {
	e := &appEnv{
		home:       getenv("HOME"),
		entrypoint: getenv("AISB_ENTRYPOINT"),
		gateHelper: getenv("AISB_GATEHELPER"),
		trace:      getenv("AISB_TRACE") != "",
		// What aisb says can carry names from files and traffic: printable only.
		logf: func(format string, args ...any) {
			fmt.Fprintf(stderr, "aisb: %s\n", termsafe.Lines(fmt.Sprintf(format, args...)))
		},
	}
	e.stderr = stderr
	if f, ok := stderr.(*os.File); ok {
		e.stderrTTY = term.IsTerminal(int(f.Fd()))
	}
	e.paths, e.pathsErr = state.FromEnv(getenv)
	e.where = engine.Where{URI: getenv("CONTAINER_HOST"), RuntimeDir: e.paths.Runtime, SSH: engine.SSHFromEnv(getenv)}
	if e.trace {
		e.where.Trace = func(s string) { e.logf("trace: %s", s) }
	}
	if self, err := os.Executable(); err == nil {
		e.where.Keeper = []string{self, "internal-podman-service"}
	}
	return e
}

// local is where Podman is for a command that needs it on this host, as
// this user (engine.ErrNotLocal otherwise, before anything is created):
// need says why, for the error (it bind-mounts this host's files, or
// judges containers by this host's process ids); "": said generally.
func (e *appEnv) local(need string) engine.Where {
	w := e.where
	w.RequireLocal = true
	w.LocalFor = need
	return w
}

// builds is how a command that may build an image shows it: on stderr,
// one updating line on a terminal, the whole log with --verbose.
func (e *appEnv) builds(c *cli.Context) image.Output {
	return image.Output{W: e.stderr, Terminal: e.stderrTTY, Verbose: c.Bool("verbose")}
}

// version is set at build time (-ldflags "-X main.version=…"); otherwise
// the module version and VCS revision recorded by the Go toolchain.
var version = ""

func versionString() string {
	v, commit := version, "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return fmt.Sprintf("%s (commit %s)", v, commit)
}

// run builds the CLI and returns the process exit status. stdout carries the
// command's output (or --json); everything else goes to stderr.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := newAppEnv(os.Getenv, stderr)
	app := &cli.App{
		Name:                 "aisb",
		Usage:                "run an AI coding agent in a rootless Podman sandbox with an explicit egress allowlist",
		Version:              versionString(),
		EnableBashCompletion: true,
		Reader:               stdin,
		Writer:               stdout,
		ErrWriter:            stderr,
		Commands: []*cli.Command{
			runCommand(e),
			configCommand(e),
			trustCommand(e),
			gateCommand(e),
			imageCommand(e),
			kubeCommand(e),
			doctorCommand(e),
			auditCommand(e),
			psCommand(e),
			changeCommand(e, "allow"),
			changeCommand(e, "deny"),
			watchCommand(e),
			reviewCommand(e),
			stateCommand(e),
			completionCommand(),
			watchdogCommand(e),
			readStatusCommand(),
			podmanServiceCommand(),
			followCommand(e),
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
		// Errors can carry paths and text from files: printable only.
		fmt.Fprintf(stderr, "aisb: %s\n", termsafe.Lines(err.Error()))
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

// errSilent carries an exit status that needs no message.
var errSilent = errors.New("")

// resolve is how a command wants its configuration.
type resolve struct {
	project bool // read the project directory's .aisb.toml
	harness bool // join the harness's hosts (a session's list)
}

// resolveConfig merges the user's file, the project's .aisb.toml (when
// how.project) and the flags, and says on stderr what was ignored. Errors
// carry exit 78. src.ProjectDir is the project directory (see projectDir),
// also without a project file.
func resolveConfig(c *cli.Context, e *appEnv, how resolve, ov config.Overrides) (r *config.Resolved, src config.Sources, err error) {
	dir, err := projectDir(c)
	if err != nil {
		return nil, src, err
	}
	return resolveConfigIn(e, dir, how, ov)
}

// resolveConfigIn is resolveConfig for a project directory already chosen.
func resolveConfigIn(e *appEnv, dir string, how resolve, ov config.Overrides) (r *config.Resolved, src config.Sources, err error) {
	if e.pathsErr != nil {
		return nil, src, exitWith(config.ExitConfig, e.pathsErr)
	}
	src = config.Sources{UserFile: e.paths.UserConfig(), ProjectDir: dir, TrustFile: e.paths.TrustStore()}
	resolveSrc := src
	if !how.project {
		resolveSrc.ProjectDir = ""
	}
	if r, err = config.Resolve(resolveSrc); err != nil {
		return nil, src, exitWith(config.ExitConfig, err)
	}
	for _, n := range r.Notices {
		e.logf("%s", n)
	}
	if err := r.Apply(ov); err != nil {
		return nil, src, exitWith(config.ExitConfig, err)
	}
	if how.harness {
		if err := r.JoinHarness(); err != nil {
			return nil, src, exitWith(config.ExitConfig, err)
		}
	}
	return r, src, nil
}
