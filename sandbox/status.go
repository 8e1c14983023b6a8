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
		// Owned by the container's root, which the agent can never be.
		if h.Uid != 0 {
			return contract.Status{}, fmt.Errorf("read the entrypoint's status: owned by uid %d, not root", h.Uid)
		}
		b, err := io.ReadAll(io.LimitReader(tr, 4097))
		if err != nil {
			return contract.Status{}, fmt.Errorf("read the entrypoint's status: %w", err)
		}
		return contract.ParseStatus(b)
	}
}
