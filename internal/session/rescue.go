package session

// Nothing the agent wrote is lost when aisb dies (SIGKILL) during a session
// on an engine that is not local and does not see the project: the agent's
// changes live only in the project's copy there, a volume. The session's
// watchdog (Abandoned) then does what aisb's own end would have done: it
// stops the sandbox, reads the copy back out of it through the API and
// writes the changes into the session's review layer (review.Import, as
// importChanges does), before the containers and the volume go; `aisb
// review SESSION` then shows them. Where that fails the sandbox and the
// volume are kept, so the copy is not lost with them, and `aisb review`
// says so (review.RecordImportFailure).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/containers/podman/v5/libpod/define"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/review"
	"github.com/aisb-dev/aisb/internal/sandbox"
	"github.com/aisb-dev/aisb/internal/state"
)

// rescueWait bounds the watchdog's read of the copy.
const rescueWait = 5 * time.Minute

// rescueCopy brings the changes of session id's copy into its review layer
// once its aisb is gone. keep says that the copy could not be read back:
// its sandbox and volume must stay. A session with no copy to read (a
// local one, one with the project shared, one whose copy never completed,
// so the agent never ran on it, or whose aisb had already brought the
// changes back and removed the volume) has nothing to do.
func rescueCopy(where engine.Where, paths state.Paths, id string) (keep bool, err error) {
	rv, err := review.Open(paths.SessionDir(id))
	if errors.Is(err, review.ErrNoSession) {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	defer func() {
		if !keep {
			// No overlay ran on a copy: its work directory is empty, and
			// goes (os.Remove takes only an empty one: a local overlay's
			// is left for aisb review's scrub).
			os.Remove(rv.Work())
		}
	}()
	sent, ok, err := rv.Sent()
	if err != nil {
		return true, err
	}
	switch {
	case !ok:
		return false, nil
	case rv.Imported():
		// aisb brought the changes back before it died.
		return false, nil
	case rv.ImportFailure() != "":
		// aisb's own import failed and kept the copy for the user: it
		// stays, whatever else is gone.
		return true, nil
	}
	// From here on the copy holds the agent's work: what keeps it on the
	// engine is said where aisb review reads it.
	defer func() {
		if keep && err != nil {
			err = errors.Join(err, rv.RecordImportFailure(err.Error()))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), rescueWait)
	defer cancel()
	c, err := engine.Connect(ctx, where)
	if err != nil {
		return true, fmt.Errorf("bring back the agent's changes of session %s: %w", id, err)
	}
	defer c.Close()
	if ok, err := c.VolumeExists(ctx, ProjectVolume(id)); err != nil || !ok {
		return err != nil, err
	}
	box := sandbox.ContainerName(id)
	in, err := c.ContainerInspect(ctx, box)
	switch {
	case engine.IsNotFound(err):
		// The copy cannot be read without its container (CopyOutProject):
		// it stays, for the user.
		return true, fmt.Errorf("bring back the agent's changes of session %s: its sandbox is gone, so the copy (volume %s) is kept on the engine", id, ProjectVolume(id))
	case err != nil:
		return true, fmt.Errorf("bring back the agent's changes of session %s: %w", id, err)
	case in.State == nil || in.State.Status == define.ContainerStateCreated.String() || in.State.Status == define.ContainerStateConfigured.String():
		// Never started: the copy is what was sent.
		return false, nil
	}
	// An exited sandbox cannot be killed (an error): the wait tells.
	c.ContainerKill(ctx, box, "KILL")
	if _, err := c.ContainerWait(ctx, box, define.ContainerStateExited, define.ContainerStateStopped); err != nil {
		return true, fmt.Errorf("bring back the agent's changes of session %s: stop its sandbox: %w", id, err)
	}
	// The layer is made anew from the copy, under the review's lock: what
	// an import cut short by aisb's death wrote is dropped, and no apply
	// reads it meanwhile (it refuses a layer not marked imported).
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(sandbox.CopyOutProject(c, id, pw)) }()
	_, err = rv.Reimport(pr, sent)
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return true, fmt.Errorf("bring back the agent's changes of session %s after its aisb died (its sandbox %s and the copy, volume %s, are kept on the engine): %s", id, box, ProjectVolume(id), review.Printable(err.Error()))
	}
	return false, nil
}
