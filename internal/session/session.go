// Package session runs one aisb session end to end: the gate, the session policy, the sandbox, the live audit, and the cleanup that leaves nothing running.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/project"
	"github.com/aisb-dev/aisb/internal/reaper"
	"github.com/aisb-dev/aisb/internal/review"
	"github.com/aisb-dev/aisb/internal/sandbox"
	"github.com/aisb-dev/aisb/internal/state"
)

// Options describe one session.
type Options struct {
	Config         *config.Resolved // after JoinHarness: the allowlist is final
	Paths          state.Paths
	Where          engine.Where
	ProjectDir     string
	Command        []string // empty: the harness's command
	Helper         string   // pasta, slirp4netns, or "" to detect
	GateName       string   // a long-lived gate to use instead of a session gate
	Unenforced     bool
	RlimitFallback bool
	CPUSeconds     uint64
	Entrypoint     string   // path of the aisb-entrypoint binary
	GateHelper     string   // path of the aisb-gatehelper binary; "": next to aisb
	Watchdog       []string // argv that starts the watchdog; nil: none
	StatusReader   []string // argv of the entrypoint status reader (sandbox.ReadUpperStatus); nil: the archive copy
	Terminal       bool
	Review         bool         // the project copy-on-write; see package review
	Trace          bool         // print phase timings ($AISB_TRACE)
	Builds         image.Output // image builds' progress; W nil: Stderr
	Logf           func(format string, args ...any)
	Stdin          io.Reader
	Stdout, Stderr io.Writer

	// AllowProjectSockets runs even when the project holds UNIX socket
	// files, which the sandbox could connect to (sockets.go).
	AllowProjectSockets bool
}

// Run runs the session and returns the command's exit status.
func Run(ctx context.Context, o Options) (int, error) {
	trace := tracer(o.Trace, o.Logf)
	defer trace("done")
	cfg := o.Config.Config
	h, err := harness.Lookup(cfg.Sandbox.Harness)
	if err != nil {
		return 0, err
	}
	if err := checkAsk(o); err != nil {
		return 0, err
	}
	command := o.Command
	if len(command) == 0 {
		command = h.Command
	}
	limits, err := resolveLimits(cfg.Limits, o.RlimitFallback, o.CPUSeconds)
	if err != nil {
		return 0, err
	}
	env, err := buildEnv(cfg.Env, os.LookupEnv)
	if err != nil {
		return 0, err
	}
	ssh, err := sshSetup(o)
	if err != nil {
		return 0, err
	}
	gitDirs, err := gitDirMounts(o.ProjectDir, o.Review, o.Logf)
	if err != nil {
		return 0, err
	}
	// The walk of the project and the hashing of the images' inputs run
	// while Podman gets ready; their results are awaited before anything
	// starts.
	sockets := scanSockets(o.ProjectDir, project.ScanBudget, o.AllowProjectSockets, o.Logf)
	if err := checkCredentialMode(len(cfg.Credentials), cfg.Network.Mode, o.GateName); err != nil {
		return 0, err
	}
	creds, err := gateCredentials(cfg.Credentials, os.LookupEnv)
	if err != nil {
		return 0, err
	}
	credentialEnv(env, creds)
	specs := hashImages(o, h)
	c, err := engine.Connect(ctx, o.Where)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	trace("connected to podman (" + c.How() + ")")
	// Podman checks the images, and the sweep for what dead sessions left
	// runs, while the session's directory, watchdog and steering are set
	// up; both end before this session creates anything.
	podman := preparePodman(c, o, specs)
	defer podman.wait()
	if err := sockets(); err != nil {
		return 0, err
	}
	trace("project scanned")

	id, owner := state.NewSessionID(), state.Owner()
	dir := o.Paths.SessionDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("session directory: %w", err)
	}
	// aisb trust refuses while a session of the project runs.
	if err := o.Paths.MarkSession(id, o.ProjectDir, owner); err != nil {
		return 0, err
	}
	trace("session directory")
	var wd *reaper.Watchdog
	if o.Watchdog != nil {
		if wd, err = reaper.StartWatchdog(o.Watchdog, owner, id); err != nil {
			return 0, err
		}
		defer wd.Stop()
		trace("watchdog started")
	}
	// The gate's secrets go with the session: squid.conf holds the
	// credentials' values, its TLS directory the session CA's key. Deferred
	// before the gate opens, this runs after the gate is gone, and before
	// the watchdog hears that the session ended; a gate handed to the
	// watchdog is its to finish, secrets included (Finish). The rest of the
	// directory (the access log, a review's layer) stays.
	var net *network
	defer func() {
		if net != nil && net.handedOff {
			return
		}
		if err := gate.RemoveSecrets(gateDir(dir)); err != nil {
			o.Logf("%v", err)
		}
	}()
	st, err := startSteer(o, id, dir, owner)
	if err != nil {
		return 0, err
	}
	defer func() { st.stop(net != nil && net.handedOff) }()
	trace("steering ready (with a gate: its audit, the live server)")
	helper, imgs, err := podman.wait()
	if err != nil {
		return 0, err
	}
	img := imgs.sandbox
	trace("images ready, reaped")
	var overlay *sandbox.Overlay
	if o.Review {
		rv, err := review.Begin(dir, review.Meta{Session: id, Project: o.ProjectDir, Owner: owner, Image: img})
		if err != nil {
			return 0, err
		}
		overlay = &sandbox.Overlay{Upper: rv.Upper(), Work: rv.Work()}
		defer endReview(c, rv, img, owner, o.Logf)
		trace("review: project recorded")
	}
	net, err = openNetwork(ctx, c, o, id, dir, owner, helper, imgs.gate, st, wd, env, creds, trace)
	if err != nil {
		return 0, err
	}
	// The exited sandbox is left to the session's watchdog to remove
	// (leave), with the gate when the watchdog takes that over, alone
	// otherwise: Podman's cleanup of it, which it runs once the sandbox's
	// process has exited, then runs off the user's path too. Should the
	// watchdog not hear of it, aisb removes it.
	var box *sandbox.Box
	leave := false
	defer func() {
		net.close(trace)
		if leave && !net.handedOff {
			if err := wd.RemoveSandbox(); err != nil {
				o.Logf("%v", err)
				box.Remove()
			}
		}
	}()
	trace("network set up")
	vols, closeState, err := openState(c, o, h, img, env)
	if err != nil {
		return 0, err
	}
	defer func() { closeState(); trace("state recorded") }()
	trace("state volume ready")

	// The sandbox is created and started while its gate starts (the policy
	// already names the gate's port): its entrypoint installs the table and
	// drops every privilege meanwhile, then waits for aisb's word that the
	// gate is ready (both ports listen and squid has found its TLS port up)
	// before it execs the command, so that the agent's very first request,
	// HTTP or HTTPS, finds it. The gate's create has returned: creates never
	// overlap (engine.Create).
	box, err = sandbox.Create(c, sandbox.Options{
		Session: id, Image: img, ProjectDir: o.ProjectDir, Command: command,
		Mode: cfg.Network.Mode, Helper: helper, PolicyDir: net.policyDir, Files: ssh.files, AgentSock: ssh.agentSock, GitDirs: gitDirs, Env: env, HostAdd: net.hostAdd, DNS: dnsIPs(cfg.Network.Resolvers()),
		Terminal: o.Terminal, Unenforced: o.Unenforced,
		PidsLimit: limits.pids, Memory: limits.memory, CPUs: limits.cpus, Rlimits: limits.rlimits,
		Volumes: vols, Owner: owner, Finisher: wd.Owner(), Overlay: overlay, StatusReader: o.StatusReader, Logf: o.Logf, Trace: trace, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
	})
	if err == nil {
		defer func() {
			if leave {
				box.Leave()
			} else {
				box.Remove()
			}
		}()
		// Listed in aisb ps, and steerable, before the agent runs: at once
		// where the command runs as the sandbox starts, once the gate is
		// ready where the entrypoint waits for it.
		if !net.awaited {
			err = st.publish(net.gatePort)
		}
	}
	if err == nil {
		err = box.Start()
	}
	if err == nil {
		err = net.ready()
	}
	if err == nil && net.awaited {
		if err = st.publish(net.gatePort); err == nil {
			err = sandbox.TellGateReady(net.policyDir)
			trace("entrypoint told the gate is ready")
		}
	}
	var exit sandbox.Exit
	if err == nil {
		trace("network ready")
		exit, err = box.Wait()
		// In review mode the overlay is scrubbed once the sandbox is gone
		// (endReview): aisb removes it itself.
		leave = err == nil && wd != nil && overlay == nil
	}
	if err != nil && !c.Alive() {
		return 0, recoverService(ctx, c, o, id, err)
	}
	if err != nil {
		return 0, err
	}
	explainExit(exit, o.Logf)
	if err := net.lost(); err != nil {
		return exit.Code, fmt.Errorf("this session lost its gate: %w; the command exited %d, but what it sent after that never left", err, exit.Code)
	}
	return exit.Code, nil
}

// endReview empties the overlay's work directory once the sandbox is gone
// and says how to see the agent's changes.
func endReview(c *engine.Conn, rv *review.Session, img, owner string, logf func(string, ...any)) {
	if err := sandbox.Scrub(c, img, rv.Work(), rv.Meta.Session, owner); err != nil {
		logf("review: %v (aisb review --apply or --discard retries)", err)
	} else if err := os.Remove(rv.Work()); err != nil {
		logf("review: %v", err)
	}
	logf("review mode: the project is unchanged; see the agent's changes with `aisb review %s`, then apply them with --apply or drop them with --discard", rv.Meta.Session)
}

// explainExit tells the user what the entrypoint said about the sandbox.
// The exit status alone proves nothing: the command can exit 77 too, so
// "could not be enforced" comes only from the entrypoint's own status.
func explainExit(e sandbox.Exit, logf func(string, ...any)) {
	switch {
	case e.Failed(contract.ExitEnforce) && e.Status.Step == contract.StepAwaitGate:
		logf("exit %d: the command did not run: the sandbox stopped waiting for its gate to be ready (no word from aisb in time, or a signal)", e.Code)
	case e.Failed(contract.ExitEnforce):
		logf("exit %d: the sandbox could not be enforced (%s failed), so the command did not run; `aisb doctor` checks this host", e.Code, e.Status.Step)
	case e.Failed(contract.ExitPolicy):
		logf("exit %d: the sandbox's session policy was missing or invalid, so the command did not run", e.Code)
	case e.StatusErr != nil:
		logf("the sandbox's entrypoint left no account of itself (%v); exit %d is the container's", e.StatusErr, e.Code)
	case e.Status.Outcome == contract.OutcomeUnenforced:
		logf("WARNING: this session ran WITHOUT its network table (--allow-unenforced; %s failed): its network was not enforced", e.Status.Step)
	case !e.Status.Ran():
		logf("exit %d: the command did not run (the entrypoint stopped at %q)", e.Code, e.Status.Step)
	}
}

// tracer prints phase timings through logf when on; for performance work only.
func tracer(on bool, logf func(string, ...any)) func(string) {
	if !on {
		return func(string) {}
	}
	start := time.Now()
	return func(phase string) {
		logf("trace: %6.1f ms %s", float64(time.Since(start).Microseconds())/1000, phase)
	}
}

// recoverService handles the Podman service dying under a running session:
// the sandbox and its gate may still run without it. aisb says so at once,
// waits for a service to answer again and removes them itself (the next
// aisb command's reaping is the fallback when it gives up).
func recoverService(ctx context.Context, c *engine.Conn, o Options, id string, cause error) error {
	names := []string{sandbox.ContainerName(id), gate.ContainerName(id)}
	o.Logf("lost the Podman service at %s (%v): the session's containers (%s) may still be running; waiting up to %s for Podman to answer again to remove them", c.URI, cause, strings.Join(names, ", "), serviceWait)
	if err := c.Reconnect(ctx, o.Where, serviceWait); err != nil {
		return fmt.Errorf("lost the Podman service and it did not come back within %s (%v); the next aisb command removes %s", serviceWait, err, strings.Join(names, ", "))
	}
	var errs []error
	for _, n := range names {
		errs = append(errs, engine.Remove(context.TODO(), c, n))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lost the Podman service mid-session; once it was back, removing the session's containers failed: %w", err)
	}
	o.Logf("Podman answers again: removed %s", strings.Join(names, ", "))
	return fmt.Errorf("the session ended because the Podman service died under it (%v)", cause)
}

// serviceWait is how long a session whose Podman service died waits for it.
const serviceWait = 2 * time.Minute
