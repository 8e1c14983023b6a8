package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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

// createLockWait is how long a create waits for the create lock.
var createLockWait = 2 * time.Minute

// lockCreate takes the per-service create lock, a file lock in the user's
// runtime directory named after the service's URI, for creates of other
// aisb processes.
//
// A waiter blocks in the kernel (flock without LOCK_NB), which wakes it
// when the lock is let go. It polled every 2 ms before: measured on the
// 2-core EPYC VM, such a waiter used ~3.6 % of a core (181 ms of CPU in
// 5 s), so twenty sessions started at once (BenchmarkScale), with
// nineteen waiting for the creates in series, spent most of a core on
// waiting, taken from the creates they waited for: each `aisb run` used
// 412-541 ms of CPU there (medians of three runs), 188-274 ms blocking.
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
	fd := int(f.Fd())
	release := func() { unix.Flock(fd, unix.LOCK_UN); f.Close() }
	got := make(chan error, 1)
	go func() {
		for {
			err := unix.Flock(fd, unix.LOCK_EX)
			if err != unix.EINTR {
				got <- err
				return
			}
		}
	}()
	timer := time.NewTimer(createLockWait)
	defer timer.Stop()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("create lock %s: %w", f.Name(), err)
		}
		return release, nil
	case <-timer.C:
		// The waiter still blocks: what it gets, it lets go at once.
		go func() {
			if <-got == nil {
				release()
				return
			}
			f.Close()
		}()
		return nil, fmt.Errorf("create lock %s: %w within %v (another aisb of this user holds it)", f.Name(), errCreateLockWait, createLockWait)
	}
}

// errCreateLockWait is a create lock not let go within createLockWait.
var errCreateLockWait = errors.New("not let go")

// CreateUnlocked creates a container without ContainerCreate's lock: the
// control of the create race's test (tests/racecreate), which must be able
// to overlap creates. aisb itself never calls it.
func (c *Conn) CreateUnlocked(ctx context.Context, s *specgen.SpecGenerator) (types.ContainerCreateResponse, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return containers.CreateWithSpec(bctx, s, nil)
}
