package gate

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/netaddr"
	"github.com/aisb-dev/aisb/internal/safefile"
)

// WatchEvery is how often a running gate re-reads the host's addresses.
const WatchEvery = 2 * time.Second

// WatchHost keeps a running gate's refused destinations in step with the
// host: every interval it re-reads the host's addresses and on-link
// prefixes (an IPv6 privacy address rotates daily, a laptop joins another
// LAN) and, when they changed, rewrites the gate's internal-destination ACL
// and has squid reconfigure through reconfigure (Reconfigure, given a
// connection). It returns when ctx ends.
func WatchHost(ctx context.Context, g *Gate, every time.Duration, reconfigure func() error, logf func(string, ...any)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := refreshHost(g, reconfigure); err != nil {
			logf("gate %s: follow the host's addresses: %v", g.Session, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// errNoACL is a squid.conf without the gate's internal-destination line.
var errNoACL = errors.New("squid.conf has no gate_internal line")

// refreshHost rewrites squid.conf's internal ACL if the host changed, and
// then has squid reconfigure.
func refreshHost(g *Gate, reconfigure func() error) error {
	h, err := netaddr.HostAddrs()
	if err != nil {
		return err
	}
	path := filepath.Join(g.Dir, "squid.conf")
	// squid can write its directory: never read through a link there.
	b, err := safefile.Read(path, 1<<20)
	if err != nil {
		return err
	}
	want := squidconf.InternalACL(h)
	lines := strings.Split(string(b), "\n")
	found := false
	for i, l := range lines {
		if strings.HasPrefix(l, "acl gate_internal dst ") {
			if l == want {
				return nil
			}
			lines[i], found = want, true
		}
	}
	if !found {
		return errNoACL
	}
	// squid.conf may hold credentials: it stays the gate's alone.
	if err := writePrivate(path, []byte(strings.Join(lines, "\n"))); err != nil {
		return err
	}
	return reconfigure()
}

// Reconfigure has the gate's squid re-read squid.conf (SIGHUP).
func Reconfigure(c engine.Engine, g *Gate) error {
	if err := c.ContainerKill(context.TODO(), g.Name, "HUP"); err != nil {
		return fmt.Errorf("reconfigure squid: %w", err)
	}
	return nil
}
