package gate

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aisb-dev/aisb/internal/state"
)

// A session gate is finished after its session's aisb has returned: the
// session's watchdog waits until the gate has logged the sandbox's last
// requests, converts them into the audit and removes the gate (see
// session.Finish); the audit's marker meanwhile is audit.MarkFinishing's.

// Quiet is how long the access log must not grow, once no client
// connection is open, before the gate is taken to have logged everything.
const Quiet = 150 * time.Millisecond

// Quiesce waits until the gate has logged every request of a sandbox that
// is gone: squid holds no client connection on either port any more (it
// logs a request, a tunnel included, before it closes the client's socket)
// and its access log has been quiet for Quiet; it gives up after within. A
// tunnel to 443 the front handed to the TLS port is logged there, when the
// front's connection to it closes, which may be after the sandbox's
// connection to the front has gone: so the TLS port's clients count too.
func (g *Gate) Quiesce(within time.Duration) {
	log := filepath.Join(g.Dir, "access.log")
	size := func() int64 {
		fi, err := os.Lstat(log)
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	// The quiet window starts at the first look that finds it quiet, not
	// at the last that found it busy: the connection may have closed just
	// after that look, or just before this one.
	last, quiet, busy := size(), time.Now(), false
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		switch n := size(); {
		case n != last || g.clientConns() > 0:
			last, busy = n, true
		case busy:
			quiet, busy = time.Now(), false
		case time.Since(quiet) >= Quiet:
			return
		}
	}
}

// clientConns counts the connections squid holds open on its two ports (on
// the front only when the TLS port is not known: a gate found running).
func (g *Gate) clientConns() int {
	if g.remote != nil {
		// Another host's sockets are not in this table.
		return 0
	}
	n := ClientConns(g.Port)
	if g.TLSPort > 0 {
		n += ClientConns(g.TLSPort)
	}
	return n
}

// ClientConns counts the connections a listener on 127.0.0.1:port holds
// open from its side (established, being set up, or closed by the client
// but not yet by the listener), from this network namespace's socket table.
func ClientConns(port int) int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0
	}
	local := fmt.Sprintf("0100007F:%04X", port)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 3 && f[1] == local {
			switch f[3] {
			case "01", "03", "08": // ESTABLISHED, SYN_RECV, CLOSE_WAIT
				n++
			}
		}
	}
	return n
}

// KillSquid kills the gate's squid through its host process (Squid), without
// Podman, and returns once it has exited, at most within: from then on its
// access log cannot grow. It reports false when it could not: no process
// recorded, or one that did not die in time.
func (g *Gate) KillSquid(within time.Duration) bool {
	if g.remote != nil {
		return g.killRemote(within)
	}
	pid, _, _ := strings.Cut(g.squid, ":")
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 1 {
		return false
	}
	// Only that very process (pid and start time): a pid reused since is
	// left alone.
	if state.OwnerAlive(g.squid) {
		_ = syscall.Kill(n, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(within); ; time.Sleep(5 * time.Millisecond) {
		if state.OwnerExited(g.squid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
