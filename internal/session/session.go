// Package session runs one aisb session end to end: the gate, the session policy, the sandbox, the live audit, and the cleanup that leaves nothing running.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/image"
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
	Entrypoint     string   // the aisb-entrypoint binary ($AISB_ENTRYPOINT); "": found for the engine (progs.Find)
	GateHelper     string   // the aisb-gatehelper binary ($AISB_GATEHELPER); "": found for the engine
	Watchdog       []string // argv that starts the watchdog; nil: none
	StatusReader   []string // argv of the entrypoint status reader (sandbox.ReadUpperStatus); nil: the archive copy
	Terminal       bool
	Review         bool         // the project copy-on-write; see package review
	Trace          bool         // print phase timings ($AISB_TRACE)
	Builds         image.Output // image builds' progress; W nil: Stderr
	Logf           func(format string, args ...any)
	Stdin          io.Reader
	Stdout, Stderr io.Writer

	// seams are the tests' fakes (seams.go); nil in aisb.
	seams *seams

	// AllowProjectSockets runs even when the project holds UNIX socket
	// files, which the sandbox could connect to (sockets.go).
	AllowProjectSockets bool
}

// Run runs the session and returns the command's exit status. Each step
// adds to the run what it set up; the one teardown (run.teardown) undoes
// it in a fixed order, whatever step failed.
func Run(ctx context.Context, o Options) (int, error) {
	// Whether the engine is local is Connect's one decision (r.connect):
	// a local one gets today's fast paths, any other everything through
	// its API (remote.go).
	r, err := plan(o)
	if err != nil {
		return 0, err
	}
	defer r.teardown()
	// Until its sandbox runs, the watchdogs of sessions that ended wait
	// with their finish (state.Starting).
	r.started = sync.OnceFunc(o.Paths.Starting())
	defer r.started()
	// Podman checks the images, and the sweep for what dead sessions left
	// runs, while the session's directory, watchdog and steering are set
	// up; both end before this session creates anything.
	steps := []func() error{
		func() error { return r.connect(ctx) },
		r.openSession,
		r.openImages,
		r.openProject,
		func() error { return r.openNetwork(ctx) },
		r.openState,
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return 0, err
		}
	}
	exit, err := r.runSandbox()
	if err != nil && !r.c.Alive() {
		// Podman died under the session: the sandbox and its gate may
		// still run without it.
		return 0, recoverService(ctx, r.c, o, r.id, err)
	}
	if err != nil {
		return 0, err
	}
	explainExit(exit, o.Logf)
	if err := r.net.lost(); err != nil {
		return exit.Code, fmt.Errorf("this session lost its gate: %w; the command exited %d, but what it sent after that never left", err, exit.Code)
	}
	return exit.Code, nil
}

// endReview empties the overlay's work directory once the sandbox is gone
// and says how to see the agent's changes.
func endReview(c engine.Engine, rv *review.Session, img, owner string, remote bool, logf func(string, ...any)) {
	if remote {
		// No overlay ran: its work directory is empty (remote.go).
		if err := os.Remove(rv.Work()); err != nil {
			logf("review: %v", err)
		}
	} else if err := sandbox.Scrub(c, img, rv.Work(), rv.Meta.Session, owner); err != nil {
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
func recoverService(ctx context.Context, c podman, o Options, id string, cause error) error {
	names := []string{sandbox.ContainerName(id), gate.ContainerName(id)}
	o.Logf("lost the Podman service at %s (%v): the session's containers (%s) may still be running; waiting up to %s for Podman to answer again to remove them", c.Address(), cause, strings.Join(names, ", "), serviceWait)
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
