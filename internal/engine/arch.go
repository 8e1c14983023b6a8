package engine

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	"github.com/containers/podman/v5/pkg/bindings/system"
)

// HostArch is the architecture (as GOARCH names it) of the machine whose
// containers the service w reaches runs, when that is known without asking
// it: on a Linux host, a Podman found by aisb (w.URI empty: the user's
// socket, aisb's shared or private service) or named by a unix:// socket
// is this kernel's, of this host's architecture. Elsewhere (a Mac's
// Podman runs its containers in a Linux VM, whose socket is forwarded) and
// for ssh:// or tcp://, only the service can say (Conn.Arch asks it).
func HostArch(w Where) (string, bool) {
	if runtime.GOOS != "linux" {
		return "", false
	}
	if w.URI == "" || strings.HasPrefix(w.URI, "unix://") {
		return runtime.GOARCH, true
	}
	return "", false
}

// Arch is the architecture of the machine the service runs containers on:
// HostArch's when known (no call: the service's /version costs about half
// a second, too much for every local session's start), else the service's
// own word, asked once. A service that is not Linux's is refused: aisb's
// programs in its containers are Linux programs.
func (c *Conn) Arch(ctx context.Context) (string, error) {
	if c.arch != "" {
		return c.arch, nil
	}
	bctx, done := c.bind(ctx)
	defer done()
	v, err := system.Version(bctx, nil)
	if err != nil {
		return "", fmt.Errorf("ask podman at %s its architecture: %w", c.URI, err)
	}
	if v.Server == nil {
		return "", fmt.Errorf("ask podman at %s its architecture: no server version in its answer", c.URI)
	}
	os, arch, _ := strings.Cut(v.Server.OsArch, "/")
	if os != "linux" || arch == "" {
		return "", fmt.Errorf("podman at %s runs its containers on %q: aisb needs a Linux engine", c.URI, v.Server.OsArch)
	}
	c.arch = arch
	return arch, nil
}
