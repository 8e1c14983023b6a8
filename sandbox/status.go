package sandbox

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/engine"
)

// Exit is how a sandbox ended: the container's exit status and the
// entrypoint's own account, which the command cannot write.
type Exit struct {
	Code int
	// Status is the entrypoint's report; StatusErr says why there is none
	// (the entrypoint never started, or the file could not be read).
	Status    contract.Status
	StatusErr error
}

// Failed reports whether the entrypoint itself said it stopped with code
// (77: not enforced, 78: bad policy); only then is code not the command's.
func (e Exit) Failed(code int) bool {
	return e.StatusErr == nil && e.Status.Outcome == contract.OutcomeFailed && e.Status.Code == code && e.Code == code
}

// readStatus copies the entrypoint's status file out of the stopped
// container through the API (an archive copy; no host mount involved).
func readStatus(c *engine.Conn, name string) (contract.Status, error) {
	root, err := rootOwner(c, name)
	if err != nil {
		return contract.Status{}, fmt.Errorf("read the entrypoint's status: %w", err)
	}
	var buf bytes.Buffer
	copyFn, err := containers.CopyToArchive(c.Ctx, name, contract.StatusPath, &buf)
	if err != nil {
		return contract.Status{}, fmt.Errorf("read the entrypoint's status: %w", err)
	}
	if err := copyFn(); err != nil {
		return contract.Status{}, fmt.Errorf("read the entrypoint's status: %w", err)
	}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return contract.Status{}, errors.New("read the entrypoint's status: not in the archive")
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
// ("0:1:1000" gives 1), while the agent's uid appears as 0.
func rootOwner(c *engine.Conn, name string) (int, error) {
	data, err := containers.Inspect(c.Ctx, name, nil)
	if err != nil {
		return 0, err
	}
	if data.HostConfig == nil {
		return 0, nil
	}
	for _, m := range data.HostConfig.IDMappings.UIDMap {
		var ctr, host, size int
		if _, err := fmt.Sscanf(m, "%d:%d:%d", &ctr, &host, &size); err == nil && ctr == 0 && size > 0 {
			return host, nil
		}
	}
	return 0, nil
}
