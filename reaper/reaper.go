// Package reaper removes what a session left behind when its aisb process died: a watchdog per session, and a sweep by every command.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/aisb-dev/aisb/engine"
	"github.com/aisb-dev/aisb/state"
)

// StartWatchdog starts a detached process (argv, plus --owner and
// --session) that removes the session's containers if this process dies
// without doing so (SIGKILL, crash). stop ends it when the session ends the
// normal way.
func StartWatchdog(argv []string, owner, session string) (stop func(), err error) {
	cmd := exec.Command(argv[0], append(argv[1:], "--owner", owner, "--session", session)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the session's watchdog: %w", err)
	}
	go cmd.Wait()
	return func() { _ = cmd.Process.Signal(syscall.SIGTERM) }, nil
}

// Watch is the watchdog's loop: it returns when the owner is gone, and then
// removes the named containers of the session and the paths that hold its
// secrets (the gate's squid.conf and TLS directory).
func Watch(ctx context.Context, where engine.Where, owner string, names, paths []string) error {
	for state.OwnerAlive(owner) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	c, err := engine.Connect(context.Background(), where)
	if err != nil {
		return err
	}
	defer c.Close()
	var errs []error
	for _, n := range names {
		errs = append(errs, engine.Remove(c, n))
	}
	for _, p := range paths {
		errs = append(errs, os.RemoveAll(p))
	}
	return errors.Join(errs...)
}

// Reap removes containers whose owning aisb process is gone: the path that
// catches what a killed session and its watchdog both left behind.
func Reap(c *engine.Conn, logf func(string, ...any)) {
	list, err := owned(c)
	if err != nil {
		logf("reap: %v", err)
		return
	}
	for name, owner := range list {
		if !state.OwnerAlive(owner) {
			logf("removing %s, left by a session that ended without cleaning up", name)
			if err := engine.Remove(c, name); err != nil {
				logf("reap: %v", err)
			}
		}
	}
}

// owned maps the names of aisb's session containers to their owners.
func owned(c *engine.Conn) (map[string]string, error) {
	list, err := containers.List(c.Ctx, new(containers.ListOptions).WithAll(true).
		WithFilters(map[string][]string{"label": {engine.LabelOwner}}))
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := map[string]string{}
	for _, ctr := range list {
		if len(ctr.Names) > 0 {
			out[ctr.Names[0]] = ctr.Labels[engine.LabelOwner]
		}
	}
	return out, nil
}
