package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/reaper"
	"github.com/aisb-dev/aisb/internal/sandbox"
	"github.com/aisb-dev/aisb/internal/session"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

func runCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run COMMAND (default: the harness) in a sandbox of this directory",
		ArgsUsage: "[-- COMMAND [ARGS...]]",
		Description: `Runs in a rootless container that sees only this directory (at /project) and
reaches only its gate, which admits the allowlisted names. Nothing from your
environment enters unless named with --env or env.pass/env.set; only
` + strings.Join(session.DefaultEnv, ", ") + ` pass by default, when set.

Git over SSH: --allow-ssh HOST lets ssh reach port 22 of HOST through the
gate; host keys are pinned from your own ~/.ssh/known_hosts (only the lines
for the listed hosts). ssh in the sandbox has NO key unless you add
--ssh-agent, which forwards your running ssh-agent (SSH_AUTH_SOCK): the
sandbox can then ask it to sign, for any host the gate admits, but never read
a key. A project's .aisb.toml can never turn the agent on.

Exit status: the command's own; 77 when the sandbox could not be enforced and
78 when its policy was invalid (the command did not run in either case; aisb
says so only when the sandbox's entrypoint reported it, never from the status
alone, since the command may exit 77 too); 1 when the session lost its gate or
its Podman service.

With --credential (or [[credentials]] in your own config) a key never enters
the sandbox: its variable there holds a placeholder, and the gate, which
decrypts only that host's connections with a per-session CA the sandbox
trusts, replaces the header on the way out.

EXAMPLE:
   aisb run --credential ANTHROPIC_API_KEY
   aisb run --harness shell --allow .github.com -- git clone https://github.com/owner/repo
   aisb run --allow-ssh github.com --ssh-agent --harness shell -- git push
   aisb run --net none -- make test`,
		Flags: []cli.Flag{
			projectFlag(),
			&cli.StringFlag{Name: "net", Usage: "network mode: allow (the gate), none, no-gate (names pinned at start, no proxy) or open (unfiltered)"},
			&cli.StringSliceFlag{Name: "allow", Usage: "also allow `HOST` (\".example.com\" for the domain and its subdomains); repeatable"},
			&cli.StringSliceFlag{Name: "allow-ssh", Usage: "let ssh reach port 22 of `HOST` through the gate (same grammar as --allow, names only); repeatable"},
			&cli.BoolFlag{Name: "ssh-agent", Usage: "forward your ssh-agent (SSH_AUTH_SOCK) so ssh inside can sign with your keys; without it ssh inside has no key"},
			&cli.BoolFlag{Name: "ask", Usage: "hold a request for an unlisted name while aisb watch (in another terminal) asks you; refused when nobody answers"},
			&cli.IntSliceFlag{Name: "host-port", Usage: "let the sandbox reach this TCP `PORT` of the host's loopback; repeatable"},
			&cli.StringSliceFlag{Name: "env", Usage: "pass `NAME` from your environment, or set NAME=VALUE; repeatable"},
			&cli.StringSliceFlag{Name: "credential", Usage: "keep the key in `NAME` on the host: the gate sets it on requests to its API host (known for ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY, or [[credentials]] in your config); the sandbox sees a placeholder; repeatable"},
			&cli.StringFlag{Name: "harness", Usage: "pi, claude, codex, opencode or shell"},
			baseImageFlag(),
			verboseFlag(),
			&cli.StringFlag{Name: "network-helper", Usage: "pasta or slirp4netns (default: pasta where available)"},
			&cli.StringFlag{Name: "gate", Usage: "use the long-lived gate `NAME` (see aisb gate up) instead of a session gate"},
			&cli.IntFlag{Name: "pids", Usage: "at most `N` processes"},
			&cli.StringFlag{Name: "memory", Usage: "at most `SIZE` of memory, e.g. 4g"},
			&cli.Float64Flag{Name: "cpus", Usage: "at most `N` CPUs"},
			&cli.BoolFlag{Name: "rlimit-fallback", Usage: "where cgroups cannot enforce limits, use rlimits: --pids as nproc (per user), --memory as data (per process)"},
			&cli.Uint64Flag{Name: "cpu-seconds", Usage: "with --rlimit-fallback: at most `N` seconds of CPU time per process"},
			&cli.StringFlag{Name: "state", Usage: "keep the harness's settings, login and sessions per `SCOPE`: project (default), harness (every project) or none"},
			&cli.BoolFlag{Name: "fresh", Usage: "this run starts with an empty harness home and keeps nothing (--state none)"},
			&cli.BoolFlag{Name: "allow-project-sockets", Usage: "run even if the project holds UNIX socket files, which the sandbox could connect to"},
			&cli.BoolFlag{Name: "review", Usage: "mount the project copy-on-write: the agent's changes wait for aisb review --apply"},
			&cli.BoolFlag{Name: "allow-unenforced", Usage: "the table is still installed; only if installing or verifying it fails, run without it, loudly (never the default)"},
		},
		Action: func(c *cli.Context) error { return runAction(c, e) },
	}
}

func runAction(c *cli.Context, e *appEnv) error {
	scope := c.String("state")
	if c.Bool("fresh") {
		if scope != "" && scope != string(config.StateNone) {
			return exitWith(config.ExitConfig, errors.New("command line: --fresh is --state none; give one of them"))
		}
		scope = string(config.StateNone)
	}
	dir, err := mountableProjectDir(c, e)
	if err != nil {
		return err
	}
	r, src, err := resolveConfigIn(e, dir, resolve{project: true, harness: true}, config.Overrides{
		Mode: c.String("net"), Allow: c.StringSlice("allow"), AllowSSH: c.StringSlice("allow-ssh"), SSHAgent: c.Bool("ssh-agent"), HostPorts: c.IntSlice("host-port"),
		Env: c.StringSlice("env"), Harness: c.String("harness"), BaseImage: c.String("base-image"),
		Pids: c.Int("pids"), Memory: c.String("memory"), CPUs: c.Float64("cpus"), Ask: c.Bool("ask"), State: scope,
		Credentials: c.StringSlice("credential"),
	})
	if err != nil {
		return err
	}
	if name := c.String("gate"); name != "" {
		sayGateLimits(e.logf, name, c.StringSlice("allow"), r)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	stdinTTY := term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd()))
	code, err := session.Run(c.Context, session.Options{
		Config: r, Paths: e.paths, Where: e.where, ProjectDir: src.ProjectDir, Command: c.Args().Slice(),
		Helper: c.String("network-helper"), GateName: c.String("gate"),
		Unenforced: c.Bool("allow-unenforced"), AllowProjectSockets: c.Bool("allow-project-sockets"), RlimitFallback: c.Bool("rlimit-fallback"), CPUSeconds: c.Uint64("cpu-seconds"),
		Entrypoint: e.entrypoint, GateHelper: e.gateHelper, Watchdog: []string{self, "internal-watchdog"}, StatusReader: []string{self, "internal-read-status"}, Terminal: stdinTTY, Review: c.Bool("review"), Trace: e.trace, Builds: e.builds(c),
		Logf: e.logf, Stdin: c.App.Reader, Stdout: c.App.Writer, Stderr: c.App.ErrWriter,
	})
	if err != nil {
		return err
	}
	if code != 0 {
		return exitWith(code, errSilent)
	}
	return nil
}

// verboseFlag is on every command that may build an image.
func verboseFlag() cli.Flag {
	return &cli.BoolFlag{Name: "verbose", Usage: "show an image build's whole log as it runs (by default only its steps, and the log when it fails)"}
}

func baseImageFlag() cli.Flag {
	return &cli.StringFlag{Name: "base-image", EnvVars: []string{"AISB_BASE_IMAGE"}, Usage: "build images on this `IMAGE` (default: sandbox.base_image)"}
}

// readStatusCommand is the entrypoint status reader that a session runs in
// Podman's user namespace (see sandbox/upper.go); it prints the file.
func readStatusCommand() *cli.Command {
	return &cli.Command{
		Name:   "internal-read-status",
		Hidden: true,
		Usage:  "print the entrypoint's status from a stopped sandbox's upper directory",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "upper", Required: true},
			&cli.IntFlag{Name: "root-uid", Required: true},
			// Started while the sandbox runs: read only once the session
			// says it exited (a byte on stdin).
			&cli.BoolFlag{Name: "when-told"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("when-told") {
				if err := sandbox.WaitToBeTold(c.App.Reader); err != nil {
					return err
				}
			}
			b, err := sandbox.ReadUpperStatus(c.String("upper"), c.Int("root-uid"))
			if err != nil {
				return err
			}
			_, err = c.App.Writer.Write(b)
			return err
		},
	}
}

func watchdogCommand(e *appEnv) *cli.Command {
	return &cli.Command{
		Name:   "internal-watchdog",
		Hidden: true,
		Usage:  "remove a session's containers once its aisb process is gone, or finish its gate when aisb hands it over",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "owner", Required: true},
			&cli.StringFlag{Name: "session", Required: true},
		},
		Action: func(c *cli.Context) error {
			s := c.String("session")
			if e.pathsErr != nil {
				return e.pathsErr
			}
			switch reaper.Wait(c.App.Reader, c.String("owner")) {
			case reaper.Finish:
				return session.Finish(context.Background(), e.where, e.paths, s, e.logf)
			case reaper.RemoveSandbox:
				return reaper.Remove(e.where, []string{sandbox.ContainerName(s)})
			case reaper.OwnerGone:
				if session.HandedOff(e.paths, s) {
					return session.Finish(context.Background(), e.where, e.paths, s, e.logf)
				}
				return session.Abandoned(e.where, e.paths, s)
			}
			return nil
		},
	}
}

// sayGateLimits tells what a long-lived gate does not apply: it admits what
// `aisb gate up` gave it, whatever this run asks.
func sayGateLimits(logf func(string, ...any), name string, allow []string, r *config.Resolved) {
	var not []string
	if len(allow) > 0 {
		not = append(not, "--allow "+strings.Join(allow, ", "))
	}
	if len(r.HarnessHosts) > 0 {
		var hs []string
		for _, h := range r.HarnessHosts {
			hs = append(hs, h.String())
		}
		not = append(not, fmt.Sprintf("the %s harness's hosts (%s)", r.Config.Sandbox.Harness, strings.Join(hs, ", ")))
	}
	if r.ProjectFile != nil && r.ProjectFile.Defines("network.allowed_hosts") {
		not = append(not, termsafe.Name(r.ProjectFile.Name)+"'s network.allowed_hosts")
	}
	if len(not) == 0 {
		return
	}
	logf("--gate %s admits only what `aisb gate up %s` gave it; not applied: %s", name, name, strings.Join(not, "; "))
}
