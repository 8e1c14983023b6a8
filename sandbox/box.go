package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/aisb-dev/aisb/engine"
)

// Run creates the sandbox, attaches to it, starts it, waits, reads the
// entrypoint's own status, removes it and returns how it ended.
func Run(c *engine.Conn, o Options) (Exit, error) {
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
	c        *engine.Conn
	o        Options
	name     string
	trace    func(string)
	cancel   context.CancelFunc
	attached chan error
	removed  bool
	reader   *statusReader // nil: the entrypoint's status by archive copy
	status   *statusPlan   // once started
}

// Create creates the sandbox, hands it its files and attaches to it. Remove
// removes it, whether it ran or not.
func Create(c *engine.Conn, o Options) (*Box, error) {
	trace := o.Trace
	if trace == nil {
		trace = func(string) {}
	}
	s, err := Spec(o)
	if err != nil {
		return nil, fmt.Errorf("sandbox spec: %w", err)
	}
	resp, err := engine.Create(c, s)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	trace("sandbox created")
	ctx, cancel := context.WithCancel(c.Ctx)
	b := &Box{c: c, o: o, name: s.Name, trace: trace, cancel: cancel, attached: make(chan error, 1)}
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
	return b, nil
}

func (b *Box) prepare(ctx context.Context, warnings []string) error {
	o := b.o
	if err := copyFiles(b.c, b.name, o.Files); err != nil {
		return err
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
	opts := new(containers.AttachOptions).WithStream(true)
	if !b.c.Version.LT(engine.MinEmptyDetachKeys) {
		// Ctrl-P belongs to the agent: no detach keys.
		opts = opts.WithDetachKeys("")
	}
	go func() {
		b.attached <- containers.Attach(ctx, b.name, o.Stdin, o.Stdout, o.Stderr, attachReady, opts)
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
	b.cancel()
	b.status.cancel()
	b.reader.close()
	if err := engine.Remove(b.c, b.name); err != nil {
		b.o.Logf("%v", err)
	}
	b.trace("sandbox removed")
}

// Run starts the created sandbox, waits for it to exit and reads the
// entrypoint's own status.
func (b *Box) Run() (Exit, error) {
	c, o := b.c, b.o
	if err := containers.Start(c.Ctx, b.name, nil); err != nil {
		return Exit{}, fmt.Errorf("start sandbox: %w", err)
	}
	b.trace("sandbox started")
	// Signals to aisb go to the agent, which ends the session the normal
	// way (and so removes the gate). With a terminal, Ctrl-C arrives as a
	// byte through the TTY, not as a signal to aisb.
	forward := []os.Signal{syscall.SIGTERM, syscall.SIGHUP}
	if !o.Terminal {
		forward = append(forward, syscall.SIGINT)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forward...)
	defer signal.Stop(sigs)
	go func() {
		for sig := range sigs {
			if err := containers.Kill(c.Ctx, b.name, new(containers.KillOptions).WithSignal(fmt.Sprint(int(sig.(syscall.Signal))))); err != nil {
				o.Logf("forward %v to the sandbox: %v", sig, err)
			}
		}
	}()
	if !o.Plain {
		// The status reader starts while the agent runs, so that reading
		// the status after the exit costs no process start.
		b.status = planStatus(c, b.name, b.reader)
	}
	code, err := containers.Wait(c.Ctx, b.name, new(containers.WaitOptions).WithCondition([]define.ContainerStatus{define.ContainerStateExited, define.ContainerStateStopped}))
	if err != nil {
		return Exit{}, fmt.Errorf("wait for sandbox: %w", err)
	}
	// Let the output drain before the container goes away.
	<-b.attached
	b.trace("sandbox exited")
	e := Exit{Code: int(code)}
	if !o.Plain {
		e.Status, e.StatusFrom, e.StatusErr = b.status.read(c)
		b.trace("entrypoint's status read from " + e.StatusFrom)
	}
	return e, nil
}
