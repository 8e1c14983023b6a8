package session

// A session on an engine that is not local (engine.Locality: another
// user's rootless Podman, another host's): nothing of this host is mounted
// there, so the sandbox's policy and the gate's files are copied into the
// created containers, the gate's ports and the engine host's addresses are
// read there by a probe, the audit comes back through the API (gate's
// remote.go), and the project is bind-mounted where a check through the
// engine shows that it sees the project at the same path (checkShared,
// sandbox's sharedpath.go), else copied into a volume on the engine's host
// (sandbox's remote.go), removed when the session ends. What needs this
// host's files or sockets there is refused before anything is created
// (checkRemote); the sweep of dead sessions does not run (it judges by this
// host's processes), nor does the hand-over of the gate to the watchdog
// (aisb finishes the audit itself; after a SIGKILL the watchdog brings the
// copy's changes into the review's layer, then removes the containers and
// the volume by name: Abandoned, rescue.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/containers/podman/v5/pkg/domain/entities/types"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/review"
	"github.com/aisb-dev/aisb/internal/sandbox"
)

// ErrRemoteUnsupported wraps what a session cannot do on an engine that is
// not local.
var ErrRemoteUnsupported = errors.New("not possible on a podman that is not local")

// checkRemote refuses what a session on an engine that is not local
// cannot do: each needs this host's files or sockets seen from there.
func checkRemote(o Options, r *run) error {
	refuse := func(what, fix string) error {
		return fmt.Errorf("%s: %w (the engine cannot see this host's files or sockets); %s", what, ErrRemoteUnsupported, fix)
	}
	switch {
	case r.ssh.agentSock != "":
		return refuse("--ssh-agent", "leave out --ssh-agent")
	case len(r.gitDirs) > 0:
		return refuse("a project whose .git is a file (a worktree or a submodule)", "run from the main work tree")
	}
	return nil
}

// ProjectVolume is the volume holding the project's copy of session id on
// an engine that is not local.
func ProjectVolume(id string) string { return "aisb-project-" + id }

// pathCheckWait bounds the check of whether the engine sees the project.
const pathCheckWait = 30 * time.Second

// checkShared finds out through the engine whether it sees the project at
// the same path (sandbox.CheckSharedPath), unless --review asks for a
// review session: on an engine that is not local that is the copy (the
// overlay's layer is this host's, not shown to be the engine's).
func (r *run) checkShared() {
	if r.o.Review {
		r.sharedWhy = "--review asks for a review session, which there is a copy"
		r.trace("project path not checked on the engine: " + r.sharedWhy)
		return
	}
	r.pathCheck = true
	v := sandbox.CheckSharedPath(r.c, sandbox.PathCheck{Session: r.id, Owner: r.owner, Image: r.imgs.sandbox,
		ProjectDir: r.o.ProjectDir, Timeout: pathCheckWait})
	r.shared, r.sharedWhy = v.Shared, v.Why
	verdict := "not shared"
	if v.Shared {
		verdict = "shared"
	}
	r.trace(fmt.Sprintf("project path checked on the engine: %s (%s) in %.1f ms", verdict, v.Why, float64(v.Took.Microseconds())/1000))
}

// openProject makes the project's volume on a remote engine that does not
// see it (the sandbox fills it as it is created) and says on stderr what
// that means, or that the project is bind-mounted where the engine sees it.
func (r *run) openProject() error {
	if !r.remote {
		return nil
	}
	if r.shared {
		r.o.Logf("podman is not local but sees the project at the same path (%s): %s is bind-mounted read-write at /project as on a local engine, and the agent changes it directly (--review for a review session of a copy instead); the policy, the gate's files and its audit still go through the API",
			r.sharedWhy, r.o.ProjectDir)
		return nil
	}
	name := ProjectVolume(r.id)
	if _, err := r.c.VolumeCreate(context.TODO(), types.VolumeCreateOptions{Name: name,
		Label: map[string]string{engine.LabelKind: "project", engine.LabelSession: r.id, engine.LabelOwner: r.owner}}); err != nil {
		return fmt.Errorf("project volume: %w", err)
	}
	r.projectVol = name
	r.o.Logf("podman is not local and the project is not shared with it (%s): this is a review session; the project is copied to volume %s on the engine's host (what git ignores is left out), the agent works on that copy, and its changes come back to %s only through `aisb review %s` (then --apply); the volume is removed when the session ends",
		r.sharedWhy, name, r.o.ProjectDir, r.id)
	r.trace("project volume created")
	return nil
}

// copied is told what the project's copy holds once it is on the engine,
// and keeps it in the review's directory too: the watchdog needs it to
// bring the changes back should aisb die (Abandoned).
func (r *run) copied(paths []string) error {
	r.sent = paths
	if r.rv == nil {
		return nil
	}
	// Without the record the watchdog would take the copy for one that
	// never completed, and remove it with the agent's work should aisb
	// die: the session does not start.
	if err := r.rv.RecordSent(paths); err != nil {
		return fmt.Errorf("keep what the copy holds: %w", err)
	}
	return nil
}

// removePathCheck removes the path check's container again: nothing of
// the session stays on the engine.
func (r *run) removePathCheck() {
	if err := engine.Remove(context.TODO(), r.c, sandbox.PathCheckName(r.id)); err != nil {
		r.o.Logf("path check: %v", err)
	}
}

// removeProject removes the project's volume, once the sandbox is gone.
func (r *run) removeProject() {
	if err := r.c.VolumeRemove(context.TODO(), r.projectVol); err != nil && !engine.IsNotFound(err) {
		r.o.Logf("remove the project's volume %s: %v", r.projectVol, err)
	}
	r.trace("project volume removed")
}

// importChanges brings the agent's changes back from the exited sandbox's
// copy of the project into the review's layer (Session.Reimport), before the
// sandbox and the volume go.
func (r *run) importChanges() {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(sandbox.CopyOutProject(r.c, r.id, pw)) }()
	st, err := r.rv.Reimport(pr, r.sent)
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		// The copy stays: it holds what the review's layer may lack. The
		// error may name the agent's files: made printable.
		why := review.Printable(err.Error())
		r.o.Logf("review: the agent's changes could not all be brought back from the engine: %s; the copy is kept in volume %s there", why, r.projectVol)
		if rerr := r.rv.RecordImportFailure(fmt.Sprintf("%s; the copy is kept in volume %s on the engine", why, r.projectVol)); rerr != nil {
			r.o.Logf("review: %v", rerr)
		}
		r.projectVol = ""
		return
	}
	r.trace(fmt.Sprintf("review: the copy's changes brought back (%d changed or new, %d deleted)", st.Changed, st.Deleted))
}

// gateLost ends the sandbox when its gate on a remote engine dies: aisb
// cannot take the gate's port on that host's loopback as it does on its
// own (gate.WatchAlive), so another process there could listen where the
// sandbox's table sends it. Fail closed: the sandbox is killed.
func (r *run) gateLost(err error) {
	r.o.Logf("WARNING: %v: aisb cannot hold its port on the engine's host, so it stops the sandbox; this session will end in error", err)
	if kerr := r.c.ContainerKill(context.TODO(), sandbox.ContainerName(r.id), "KILL"); kerr != nil && !engine.IsNotFound(kerr) {
		r.o.Logf("stop the sandbox: %v", kerr)
	}
}
