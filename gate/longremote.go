package gate

// A long-lived gate on an engine that is not local (docs/remote.md). `gate
// up` starts it as a session's remote gate is started (remote.go: the probe
// on the engine host's loopback, the files copied in, squid ready in the
// copy of its logs), then lets its own copy go: the detached follower
// copies the logs again from the container's start into the gate's
// directory on this host, where the audit follower reads them as it reads
// a local gate's, for as long as the container runs (alive is that
// container running: the engine host's socket table is not aisb's to
// read). `gate down` kills the container, waits for the follower to have
// copied the logs to their end (completeLogs), and only then removes it.
// The engine host's addresses are read once, by the probe.

import (
	"context"
	"errors"
	"fmt"
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

// Runs says whether the remote gate's container runs.
func (g *Gate) Runs() bool { return g.running(g.remote) }

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
