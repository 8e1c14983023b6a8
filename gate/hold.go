package gate

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/gate/audit"
)

// Squid checks its TLS port (its own parent peer, see squidconf/handover.go)
// as it starts, before its listener there is up. That first check is refused, and
// squid's connection opener tries again only after a fixed 50 ms; until a
// check has succeeded the front takes the TLS port for down and fails every
// tunnel to 443, so the gate is not ready before it. That wait was a third
// of the gate's start.
//
// So aisb holds the TLS port from the moment it chooses it: a listener of its
// own shares the port with squid's (SO_REUSEPORT on both; squid's port has
// worker-queues, which sets it) and answers squid's first check at once. The
// hold is released once squid's check has been seen (here or, when it
// reached squid's own listener instead, in the access log) and squid's own
// listener has joined the port, so the port is never free for a socket of
// another user to take; readiness is then judged on squid's listeners
// alone, which must have squid's uid (Gate.squidListening). The kernel
// shares a port only between sockets of one uid: squid runs as the uid of
// Podman's user on the host (keep-id), so the port is held only where that
// is this process's uid (engine.Conn.SameUser). Elsewhere (a Podman on
// another host, or another user's, as in the gate package's tests) nothing
// answers early and squid's own retry does, 50 ms later.
//
// The sandbox cannot connect to the TLS port (its table admits the front
// only) and is told the gate is ready only after the hold is released. A
// local process of another user that connects from audit.SelfAddr while the port
// is held is taken for squid's check: the gate may then be ready a moment
// before squid has found its TLS port up, and a first tunnel to 443 fail
// (a 500, audited); it gains no way through. squid's port stays shared
// after the hold: WatchAlive stops the gate if another socket ever joins it.
type portHold struct {
	ln      net.Listener
	checked atomic.Bool  // squid's check (a connection from audit.SelfAddr) arrived
	conns   atomic.Int64 // connections the hold took, squid's check among them (for errors)
	made    time.Time
	checkAt atomic.Int64 // when squid's check arrived (UnixNano), for errors
	once    sync.Once
	done    chan struct{}
}

// holdPort listens on a free port of 127.0.0.1 with SO_REUSEPORT, so that
// squid can listen there too, and notes squid's check when it arrives.
func holdPort() (*portHold, int, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, 0, err
	}
	h := &portHold{ln: ln, done: make(chan struct{}), made: time.Now()}
	go h.accept()
	return h, ln.Addr().(*net.TCPAddr).Port, nil
}

// accept takes the connections made to the held port until it is released:
// squid's check comes from audit.SelfAddr (tcp_outgoing_address) and carries
// nothing; anything else is closed unread and does not count.
func (h *portHold) accept() {
	defer close(h.done)
	for {
		c, err := h.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of descriptors, say: the listener stays (the port
			// must not fall free) and squid's check waits in its queue.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		h.conns.Add(1)
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && a.IP.String() == audit.SelfAddr {
			h.checkAt.CompareAndSwap(0, time.Now().UnixNano())
			h.checked.Store(true)
		}
		c.Close()
	}
}

// held reports whether the hold still listens.
func (h *portHold) held() bool {
	if h == nil {
		return false
	}
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// checkDelay is how long after the hold was made squid's check reached it.
func (h *portHold) checkDelay() string {
	at := h.checkAt.Load()
	if at == 0 {
		return "never"
	}
	return time.Unix(0, at).Sub(h.made).Round(time.Millisecond).String()
}

// sawCheck reports whether squid's check of its TLS port reached the hold.
func (h *portHold) sawCheck() bool { return h != nil && h.checked.Load() }

// CheckedAtHold reports whether squid's check of its TLS port reached aisb's
// hold rather than squid's own retry (for the trace and its tests).
func (g *Gate) CheckedAtHold() bool { return g.hold.sawCheck() }

// release closes the held listener and waits for its accept loop; squid's
// own listener keeps the port. Safe to call more than once, and on nil.
func (h *portHold) release() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		h.ln.Close()
		<-h.done
	})
}
