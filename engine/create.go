package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/specgen"
	"golang.org/x/sys/unix"
)

// Create creates a container, one at a time per Podman service.
//
// Podman resolves --userns=keep-id inside the service process through
// libsubid, which is not thread-safe: two creates in flight in one service
// can corrupt each other's id mapping (a range counted twice, or no
// sub-range at all), and the container then fails at start with
// "container uses ID mappings … but doesn't map UID 0" (measured here with
// sessions started together against one service, see the concurrency
// test). The mapping is already wrong when create returns, so holding a
// lock around create alone is enough; a create takes milliseconds. A
// private service (one per aisb process) needs no lock.
func Create(c *Conn, s *specgen.SpecGenerator) (*types.ContainerCreateResponse, error) {
	if !c.Private() {
		unlock, err := c.lockCreate()
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	resp, err := containers.CreateWithSpec(c.Ctx, s, nil)
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// lockCreate takes the per-service create lock, a file lock in the user's
// runtime directory named after the service's URI.
func (c *Conn) lockCreate() (unlock func(), err error) {
	dir := c.lockDir
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create lock: %w", err)
	}
	sum := sha256.Sum256([]byte(c.URI))
	f, err := os.OpenFile(filepath.Join(dir, "create-"+hex.EncodeToString(sum[:6])+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create lock: %w", err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("create lock %s: %w", f.Name(), err)
		}
	}
}
