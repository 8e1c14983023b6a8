package gate

// A long-lived gate on an engine that is not local (docs/remote.md). `gate
// up` starts it as a session's remote gate is started (remote.go: the probe
// on the engine host's loopback, the files copied in, squid ready in the
// copy of its logs), then lets its own copy go: the detached follower
// copies the logs again from the container's start into the gate's
// directory on this host, where the audit follower reads them as it reads
// a local gate's, for as long as the container runs (alive is that
// container running: the engine host's socket table is not aisb's to
// read); should the logs' stream end early while it runs (the connection
// to the engine dropped), the copy resumes where it was (ResumeLogs).
// `gate down` kills the container, waits for the follower to have copied
// the logs to their end (completeLogs), and only then removes it.
// The engine host's addresses are read once, by the probe.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/containers/podman/v5/libpod/define"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/state"
)

// followerEnds bounds how long gate down waits for a remote gate's
// follower to have copied the last of the logs.
const followerEnds = 10 * time.Second

// FollowRemote has g, a long-lived gate described by Running, follow its
// container's logs on the engine c, which is not local, into its
// directory from the container's start (its follower's first step).
func (g *Gate) FollowRemote(c engine.Engine) error {
	g.remote = c
	if err := g.followLogs(); err != nil {
		return fmt.Errorf("gate %s: follow its logs: %w", g.Session, err)
	}
	return nil
}

// Runs says whether the remote gate's container runs; an error is an
// engine that did not answer, which says nothing either way.
func (g *Gate) Runs() (bool, error) {
	data, err := g.remote.ContainerInspect(context.TODO(), g.Name)
	if engine.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return data.State != nil && data.State.Running, nil
}

// ResumeLogs restarts the copy of the remote gate's logs if its stream
// ended early (the connection to the engine dropped) while the container
// runs: the logs are asked again from the container's start and what the
// copy already holds is skipped, so the audit has no gap. It reports
// whether it restarted the stream.
func (g *Gate) ResumeLogs() bool {
	l := g.logs
	if l == nil {
		return false
	}
	select {
	case <-l.done:
	default:
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &remoteLogs{done: make(chan struct{}), cancel: cancel, acc: l.acc, cache: l.cache, out: l.out, errs: l.errs}
	g.logs = n
	go func() {
		defer close(n.done)
		out := &skipWriter{w: &n.out, skip: n.out.n}
		errs := &skipWriter{w: &n.errs, skip: n.errs.n}
		n.err = g.remote.ContainerLogs(ctx, g.Name, true, out, errs)
	}()
	return true
}

// skipWriter drops the first skip bytes written to it, then writes to w.
type skipWriter struct {
	w    io.Writer
	skip int64
}

func (s *skipWriter) Write(p []byte) (int, error) {
	all := len(p)
	if s.skip > 0 {
		k := min(int64(len(p)), s.skip)
		s.skip -= k
		p = p[k:]
	}
	if len(p) > 0 {
		if _, err := s.w.Write(p); err != nil {
			return 0, err
		}
	}
	return all, nil
}

// EndRemote completes the copy of the remote gate's logs once its
// container has exited (within bounds the wait), and closes it.
func (g *Gate) EndRemote(within time.Duration) error {
	if g.logs == nil {
		return nil
	}
	err := g.completeLogs(within)
	g.logs.acc.Close()
	g.logs.cache.Close()
	g.logs = nil
	return err
}

// releaseLogs stops this process's copy of the remote gate's logs (gate
// up's, once the gate is ready: the follower copies them from the start).
func (g *Gate) releaseLogs() {
	if g.logs == nil {
		return
	}
	g.logs.cancel()
	<-g.logs.done
	g.logs.acc.Close()
	g.logs.cache.Close()
	g.logs = nil
}

// ErrOtherEngine is a long-lived gate recorded on another engine than the
// one a command reaches.
var ErrOtherEngine = errors.New("the gate runs on another podman")

// checkEngine refuses a record of a gate on another engine than where
// ("" the local one, else the URI of one that is not local).
func checkEngine(name string, rec Record, where string) error {
	if rec.Engine == where {
		return nil
	}
	on := func(e string) string {
		if e == "" {
			return "your local podman"
		}
		return e
	}
	return fmt.Errorf("gate %s: %w: it was started on %s, not on %s; set CONTAINER_HOST to where it runs, or `aisb gate down %s` there first",
		name, ErrOtherEngine, on(rec.Engine), on(where), name)
}

// downRemote is Down for a gate on an engine that is not local: kill it,
// let its follower copy its logs to their end, then remove it.
func downRemote(c engine.Engine, name string, rec Record) error {
	ctr := ContainerName(name)
	_ = c.ContainerKill(context.TODO(), ctr, "KILL")
	ctx, cancel := context.WithTimeout(context.Background(), followerEnds)
	defer cancel()
	_, _ = c.ContainerWait(ctx, ctr, define.ContainerStateExited, define.ContainerStateStopped)
	for rec.Follower != "" && !state.OwnerExited(rec.Follower) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	return engine.Remove(context.TODO(), c, ctr)
}
