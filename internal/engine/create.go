package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/specgen"
	"golang.org/x/sys/unix"
)

// ContainerCreate creates a container, one at a time per Podman service: never two
// creates of aisb in flight in one service, whether from one aisb process
// (a session's gate and sandbox) or from several sharing a service.
//
// Why: rootless Podman resolves --userns=keep-id (every container aisb
// makes) inside the service, per create, through libsubid, which reads
// /etc/subuid with one process-global file database (shadow's commonio: an
// "open" flag, a list, a cursor) and is not safe for concurrent use. With
// two creates at once the second lookup fails, Podman ignores that and maps
// only the agent's uid ("1000:0:1"), and the container fails at start with
// "container uses ID mappings … but doesn't map UID 0"; or the service dies
// of SIGSEGV inside subid_get_uid_ranges, with every session on it. The
// user namespace and its pause process play no part (measured with Podman
// 5.4.2: tests/podmanrace_test.go, docs/networking.md). The mapping is
// settled when create returns, so the lock is held around create alone.
func (c *Conn) ContainerCreate(ctx context.Context, s *specgen.SpecGenerator) (types.ContainerCreateResponse, error) {
	mu := createMutex(c.URI)
	mu.Lock()
	defer mu.Unlock()
	if !c.Private() {
		// A private service serves this process only: the mutex is enough.
		unlock, err := c.lockCreate()
		if err != nil {
			return types.ContainerCreateResponse{}, err
		}
		defer unlock()
	}
	bctx, done := c.bind(ctx)
	defer done()
	return containers.CreateWithSpec(bctx, s, nil)
}

// createMutexes holds one mutex per service address: creates of this
// process, whichever Conn they use.
var createMutexes sync.Map // URI -> *sync.Mutex

func createMutex(uri string) *sync.Mutex {
	mu, _ := createMutexes.LoadOrStore(uri, new(sync.Mutex))
	return mu.(*sync.Mutex)
}

// lockCreate takes the per-service create lock, a file lock in the user's
// runtime directory named after the service's URI, for creates of other
// aisb processes.
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
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Millisecond) {
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

// CreateUnlocked creates a container without ContainerCreate's lock: the
// control of the create race's test (tests/racecreate), which must be able
// to overlap creates. aisb itself never calls it.
func (c *Conn) CreateUnlocked(ctx context.Context, s *specgen.SpecGenerator) (types.ContainerCreateResponse, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return containers.CreateWithSpec(bctx, s, nil)
}
