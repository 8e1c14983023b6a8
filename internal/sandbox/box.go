package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/containers/podman/v5/libpod/define"

	"github.com/aisb-dev/aisb/internal/engine"
)

// Run creates the sandbox, attaches to it, starts it, waits, reads the
// entrypoint's own status, removes it and returns how it ended.
func Run(c engine.Engine, o Options) (Exit, error) {
	b, err := Create(c, o)
	if err != nil {
		return Exit{}, err
	}
	defer b.Remove()
	return b.Run()
}

// Box is a created sandbox with aisb attached to it, not yet started: what
// it runs on start can be made ready meanwhile (its gate).
type Box struct {
	c        engine.Engine
	o        Options
	name     string
	trace    func(string)
	cancel   context.CancelFunc
	attached chan error
	removed  bool
	released bool
	reader   *statusReader // nil: the entrypoint's status by archive copy
	status   *statusPlan   // once started: see plan
	planned  chan *statusPlan
	// stopSignals ends the forwarding of aisb's signals to the sandbox,
	// which Start began.
	stopSignals func()
}

// Create creates the sandbox, hands it its files and attaches to it. Remove
// removes it, whether it ran or not.
func Create(c engine.Engine, o Options) (*Box, error) {
	trace := o.Trace
	if trace == nil {
		trace = func(string) {}
	}
	s, err := Spec(o)
	if err != nil {
		return nil, fmt.Errorf("sandbox spec: %w", err)
	}
	resp, err := c.ContainerCreate(context.TODO(), s)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	trace("sandbox created")
	ctx, cancel := context.WithCancel(context.TODO())
	b := &Box{c: c, o: o, name: s.Name, trace: trace, cancel: cancel, attached: make(chan error, 1), stopSignals: func() {}}
	// Before the agent runs: what reads its status afterwards must not be
	// a file it could change (upper.go).
	if !o.Plain {
		if b.reader, err = prepareReader(o.StatusReader, c.LocalRuntimeDir()); err != nil {
			trace(err.Error())
		}
	}
	if err := b.prepare(ctx, resp.Warnings); err != nil {
		b.Remove()
		return nil, err
	}
	trace("sandbox attached")
	if !o.Plain {
		// The status reader starts now, so that reading the status after
		// the exit costs no process start: its own start (nsenter, aisb's
		// ~35 ms of initialisation on a 2-core VM) runs beside the
		// sandbox's start and the gate's. Started once the sandbox had
		// started, it was still starting when a short command exited. Wait
		// takes the plan.
		b.planned = make(chan *statusPlan, 1)
		go func() { b.planned <- planStatus(c, b.name, b.reader) }()
	}
	return b, nil
}

func (b *Box) prepare(ctx context.Context, warnings []string) error {
	o := b.o
	files := o.Files
	if o.Remote {
		// The policy goes in the same copy as the other files.
		policy, err := policyFiles(o.PolicyDir)
		if err != nil {
			return err
		}
		files = append(policy, files...)
	}
	if err := copyFiles(b.c, b.name, files); err != nil {
		return err
	}
	if o.Remote {
		b.trace("session policy copied in")
	}
	if o.Remote && !o.SharedProject {
		if err := copyProject(b.c, b.name, o.ProjectDir, b.trace, o.ProjectCopied); err != nil {
			return err
		}
	}
	for _, w := range warnings {
		// Podman creates the container and ignores the limits where it
		// cannot enforce them (rootless cgroup v1), saying so only in a
		// create warning (text, not an error): never let that pass.
		if (o.PidsLimit > 0 || o.Memory > 0 || o.CPUs > 0) && strings.Contains(strings.ToLower(w), "limits") {
			return fmt.Errorf("resource limits cannot be enforced on this host: podman says %q; use --rlimit-fallback for nproc/data/cpu-seconds limits instead", w)
		}
		o.Logf("podman: %s", w)
	}
	attachReady := make(chan bool, 1)
	var opts engine.AttachOptions
	if v := b.c.ServiceVersion(); !v.LT(engine.MinEmptyDetachKeys) {
		// Ctrl-P belongs to the agent: no detach keys.
		opts.NoDetachKeys = true
	}
	go func() {
		b.attached <- b.c.ContainerAttach(ctx, b.name, o.Stdin, o.Stdout, o.Stderr, attachReady, opts)
	}()
	select {
	case <-attachReady:
		return nil
	case err := <-b.attached:
		return fmt.Errorf("attach to sandbox: %w", err)
	}
}

// Remove removes the sandbox (once; a missing one is no error) and says
// why it could not.
func (b *Box) Remove() {
	if b.removed {
		return
	}
	b.removed = true
	b.release()
	if err := engine.Remove(context.TODO(), b.c, b.name); err != nil {
		b.o.Logf("%v", err)
	}
	b.trace("sandbox removed")
}

// Leave lets go of the exited sandbox without removing it: the session's
// watchdog removes it (session.Finish). Remove still can.
func (b *Box) Leave() {
	b.release()
	b.trace("sandbox left for the watchdog to remove")
}

// release ends what aisb runs for the sandbox: the forwarding of signals,
// the attach, the status reader.
func (b *Box) release() {
	if b.released {
		return
	}
	b.released = true
	b.stopSignals()
	b.cancel()
	b.plan().cancel()
	b.reader.close()
}

// Run starts the created sandbox, waits for it to exit and reads the
// entrypoint's own status.
func (b *Box) Run() (Exit, error) {
	if err := b.Start(); err != nil {
		return Exit{}, err
	}
	return b.Wait()
}

// Start starts the created sandbox; from now on signals to aisb go to it.
// Wait waits for its end.
func (b *Box) Start() error {
	c, o := b.c, b.o
	// Signals to aisb go to the agent, which ends the session the normal
	// way (and so removes the gate). With a terminal, Ctrl-C arrives as a
	// byte through the TTY, not as a signal to aisb. They are caught from
	// before the start: the agent may run before ContainerStart returns,
	// and a signal sent then (once it is seen running) would otherwise
	// have ended aisb instead (exit 130, seen under load). One that comes
	// during the start is forwarded once it has started.
	forward := []os.Signal{syscall.SIGTERM, syscall.SIGHUP}
	if !o.Terminal {
		forward = append(forward, syscall.SIGINT)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forward...)
	if err := c.ContainerStart(context.TODO(), b.name); err != nil {
		signal.Stop(sigs)
		return fmt.Errorf("start sandbox: %w", err)
	}
	b.stopSignals = func() { signal.Stop(sigs) }
	b.trace("sandbox started")
	go func() {
		for sig := range sigs {
			if err := c.ContainerKill(context.TODO(), b.name, fmt.Sprint(int(sig.(syscall.Signal)))); err != nil {
				o.Logf("forward %v to the sandbox: %v", sig, err)
			}
		}
	}()
	return nil
}

// plan is the status plan once Start's planning ended; nil without one.
func (b *Box) plan() *statusPlan {
	if b.planned != nil {
		b.status = <-b.planned
		b.planned = nil
	}
	return b.status
}

// exitSeen bounds how long Podman may take to say that a sandbox whose
// attach has ended has exited, before exitCode asks it to wait instead.
const exitSeen = 100 * time.Millisecond

// exitCode is the exited sandbox's exit status. Podman's wait returns only
// once conmon has exited, which it does after it has run Podman's cleanup
// of the container (a process of its own: ~40 ms here); the status is
// known before that, from the exit file conmon writes first, which an
// inspect reads. So once the attach ended (attached), the sandbox is
// inspected until it no longer runs; it is waited for as before when the
// attach failed, or when it still runs after exitSeen (a command that closed
// its output, say, and runs on).
func (b *Box) exitCode(attached bool) (int32, error) {
	c := b.c
	for deadline := time.Now().Add(exitSeen); attached && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		data, err := c.ContainerInspect(context.TODO(), b.name)
		if err != nil || data.State == nil {
			break
		}
		switch data.State.Status {
		case define.ContainerStateExited.String(), define.ContainerStateStopped.String():
			return data.State.ExitCode, nil
		}
	}
	return waitExited(c, b.name)
}

// waitExited waits until Podman has the sandbox exited (or stopped: exited,
// its cleanup not yet done) and returns its exit status. It returns once
// Podman's cleanup of the container has run (conmon has exited).
func waitExited(c engine.Engine, name string) (int32, error) {
	return c.ContainerWait(context.TODO(), name, define.ContainerStateExited, define.ContainerStateStopped)
}

// Wait waits for the started sandbox to exit and reads the entrypoint's own
// status.
func (b *Box) Wait() (Exit, error) {
	c, o := b.c, b.o
	defer b.stopSignals()
	// The output drains first: conmon ends the attach once the sandbox's
	// process has exited.
	attachErr := <-b.attached
	code, err := b.exitCode(attachErr == nil)
	if err != nil {
		return Exit{}, fmt.Errorf("wait for sandbox: %w", err)
	}
	b.trace("sandbox exited")
	if o.Exited != nil {
		// Told only once Podman's cleanup has torn the sandbox's network
		// down (exited, not merely stopped): until then what a socket of
		// the agent's still holds in its buffer goes on through the gate,
		// whose end would cut that tunnel before squid logged it. When the
		// wait fails, the gate's end waits for the sandbox's removal, as
		// on a local engine.
		if _, err := c.ContainerWait(context.TODO(), b.name, define.ContainerStateExited); err == nil {
			b.trace("sandbox's network gone")
			o.Exited()
		}
	}
	e := Exit{Code: int(code)}
	if !o.Plain {
		e.Status, e.StatusFrom, e.StatusErr = b.plan().read(c)
		b.trace("entrypoint's status read from " + e.StatusFrom)
	}
	return e, nil
}
