package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/containers/podman/v5/libpod/define"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/engine"
)

// Exit is how a sandbox ended: the container's exit status and the
// entrypoint's own account, which the command cannot write.
type Exit struct {
	Code int
	// Status is the entrypoint's report; StatusErr says why there is none
	// (the entrypoint never started, or the file could not be read).
	Status    contract.Status
	StatusErr error
	// StatusFrom says where the status was read: StatusFromUpper or
	// StatusFromCopy (for AISB_TRACE).
	StatusFrom string
}

// Where the entrypoint's status was read from.
const (
	StatusFromUpper = "the container's upper directory"
	StatusFromCopy  = "an archive copy"
)

// Failed reports whether the entrypoint itself said it stopped with code
// (77: not enforced, 78: bad policy); only then is code not the command's.
func (e Exit) Failed(code int) bool {
	return e.StatusErr == nil && e.Status.Outcome == contract.OutcomeFailed && e.Status.Code == code && e.Code == code
}

// statusPlan is how the entrypoint's status is read once the sandbox has
// exited, settled while it runs: from its upper directory where Podman is
// on this host and its storage overlay (the reader, prepared before the
// sandbox started, is started now and told to read after the exit), else
// by an archive copy through the API (no host mount involved).
type statusPlan struct {
	name    string
	pending *pendingRead // nil: no reader, the copy
	why     string       // why not the upper directory
}

// planStatus inspects the attached sandbox and starts the status reader.
func planStatus(c engine.Engine, name string, r *statusReader) *statusPlan {
	p := &statusPlan{name: name, why: "the storage driver is not overlay"}
	data, err := c.ContainerInspect(context.TODO(), name)
	if err != nil {
		p.why = err.Error()
		return p
	}
	switch {
	case data.GraphDriver == nil || data.GraphDriver.Name != "overlay":
	case data.GraphDriver.Data["UpperDir"] == "":
		p.why = "Podman names no upper directory"
	default:
		if p.pending, err = r.start(data.GraphDriver.Data["UpperDir"], rootOwner(data)); err != nil {
			p.why = err.Error()
		}
	}
	return p
}

// read reads the status of the exited sandbox; from says where it was
// read, and why not from the upper directory.
func (p *statusPlan) read(c engine.Engine) (s contract.Status, from string, err error) {
	if p.pending != nil {
		s, err := p.pending.read()
		p.pending = nil
		if err == nil {
			return s, StatusFromUpper, nil
		}
		p.why = err.Error()
	}
	// Podman's cleanup of the exited container (its storage unmounted),
	// which the session no longer waits for before it reads the status
	// (Box.exitCode), holds the container's lock, and a copy made while it
	// runs can come back empty: the copy waits for it (Podman's wait
	// returns once it is done), and inspects the container again.
	if _, err := waitExited(c, p.name); err != nil {
		return contract.Status{}, "", fmt.Errorf("read the entrypoint's status: %w", err)
	}
	data, err := c.ContainerInspect(context.TODO(), p.name)
	if err != nil {
		return contract.Status{}, "", fmt.Errorf("read the entrypoint's status: %w", err)
	}
	from = StatusFromCopy + " (not " + StatusFromUpper + ": " + p.why + ")"
	for try := 1; ; try++ {
		s, err = copyStatus(c, p.name, rootOwner(data))
		if !errors.Is(err, errNotInArchive) || try == copyTries {
			if try > 1 {
				from += fmt.Sprintf(", copied %d times", try)
			}
			return s, from, err
		}
		time.Sleep(copyRetry)
	}
}

// An archive without the status file can be Podman's copy racing its own
// cleanup of the exited container (seen on the test host, once in a full
// run): the copy is tried again before the file counts as missing.
const (
	copyTries = 3
	copyRetry = 100 * time.Millisecond
)

// errNotInArchive is an archive copy of the stopped sandbox without the
// status file.
var errNotInArchive = errors.New("read the entrypoint's status: not in the archive")

// cancel ends a reader that was never told to read.
func (p *statusPlan) cancel() {
	if p != nil {
		p.pending.cancel()
		p.pending = nil
	}
}

// copyStatus copies the status file out through the API; root is the uid
// the archive gives the container's root.
func copyStatus(c engine.Engine, name string, root int) (contract.Status, error) {
	var buf bytes.Buffer
	if err := c.ContainerCopyOut(context.TODO(), name, contract.StatusPath, &buf); err != nil {
		return contract.Status{}, fmt.Errorf("read the entrypoint's status: %w", err)
	}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return contract.Status{}, errNotInArchive
		}
		if err != nil {
			return contract.Status{}, fmt.Errorf("read the entrypoint's status: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			return contract.Status{}, fmt.Errorf("read the entrypoint's status: %s is not a regular file", contract.StatusPath)
		}
		// Owned by the container's root, which the agent can never be. The
		// archive names owners as Podman's own user namespace sees them.
		if h.Uid != root {
			return contract.Status{}, fmt.Errorf("read the entrypoint's status: owned by uid %d, not the container's root (%d)", h.Uid, root)
		}
		b, err := io.ReadAll(io.LimitReader(tr, 4097))
		if err != nil {
			return contract.Status{}, fmt.Errorf("read the entrypoint's status: %w", err)
		}
		return contract.ParseStatus(b)
	}
}

// rootOwner is the uid an archive of the container gives its root: under
// rootless Podman with keep-id, the id its uid map sends container uid 0 to
// ("0:1:1000" gives 1), while the agent's uid appears as 0. Without a map,
// container and namespace ids are the same (0). -1, which no file has,
// when the map sends the root and the agent to the same id.
func rootOwner(data *define.InspectContainerData) int {
	if data.HostConfig == nil || data.HostConfig.IDMappings == nil || len(data.HostConfig.IDMappings.UIDMap) == 0 {
		return 0
	}
	root, agent := -1, -2
	for _, m := range data.HostConfig.IDMappings.UIDMap {
		var ctr, host, size int
		if _, err := fmt.Sscanf(m, "%d:%d:%d", &ctr, &host, &size); err != nil || size <= 0 {
			continue
		}
		if ctr == 0 {
			root = host
		}
		if contract.AgentUID >= ctr && contract.AgentUID-ctr < size {
			agent = host + (contract.AgentUID - ctr)
		}
	}
	if root == agent {
		return -1
	}
	return root
}
