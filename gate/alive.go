package gate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrLost is the gate stopping while its session still runs.
var ErrLost = errors.New("the gate stopped")

// WatchAlive checks every interval that the gate still listens. When it does
// not (twice in a row), it calls lost once, at once, and then holds the
// gate's port on the host's loopback until ctx ends: the sandbox's table
// admits exactly that port, so no other local service may take it over.
// The sandbox's requests then fail; its egress is gone (fail closed).
//
// It also checks that squid alone listens on the TLS port. squid shares
// that port (worker-queues: SO_REUSEPORT, for aisb's hold at start, see
// hold.go), so another process of the same uid on the host's network (a
// compromised gate of another session, say) could join it and receive a
// share of the tunnels the front hands over. Seen, that ends the gate the
// same way: squid is killed, its port held, and lost says why.
func WatchAlive(ctx context.Context, g *Gate, every time.Duration, lost func(error)) {
	if g.remote != nil {
		watchAliveRemote(ctx, g, every, lost)
		return
	}
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		if err := g.tlsPortShared(); err != nil {
			at := time.Now().Format("15:04:05")
			if !g.KillSquid(time.Second) {
				lost(fmt.Errorf("%w at %s: %v; squid could not be stopped (its process is not known)", ErrLost, at, err))
				<-ctx.Done()
				return
			}
			// squid, just killed, may hold the front for a moment.
			front, ferr := takeFront(g, time.Second)
			if ferr != nil {
				lost(fmt.Errorf("%w at %s: %v; squid was stopped, but 127.0.0.1:%d is no longer its: %v", ErrLost, at, err, g.Port, ferr))
			} else {
				lost(fmt.Errorf("%w at %s: %v; the gate was stopped", ErrLost, at, err))
			}
			keep(ctx, front)
			return
		}
		if Listening(g.Port) {
			misses = 0
			continue
		}
		if misses++; misses < 2 {
			continue
		}
		at := time.Now().Format("15:04:05")
		front, err := takeFront(g, 0)
		if err != nil {
			lost(fmt.Errorf("%w at %s (127.0.0.1:%d is no longer its; something else took the port: %v)", ErrLost, at, g.Port, err))
		} else {
			lost(fmt.Errorf("%w at %s (nothing listens on 127.0.0.1:%d any more)", ErrLost, at, g.Port))
		}
		keep(ctx, front)
		return
	}
}

// tlsPortShared says whether a socket other than squid's listens on the
// gate's TLS port (unknown, 0, for a gate found running: not checked).
func (g *Gate) tlsPortShared() error {
	if g.TLSPort == 0 || g.hold.held() {
		return nil
	}
	l, err := listeners()
	if err != nil {
		return nil
	}
	if n := len(l[g.TLSPort]); n > 1 {
		return fmt.Errorf("%d sockets listen on its TLS port 127.0.0.1:%d, where only squid may", n, g.TLSPort)
	}
	return nil
}

// takeFront listens on the gate's front port, trying for up to within.
func takeFront(g *Gate, within time.Duration) (net.Listener, error) {
	deadline := time.Now().Add(within)
	for {
		ln, err := net.Listen("tcp", g.Addr())
		if err == nil || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// keep holds front (nil: nothing to hold) until ctx ends, closing every
// connection made to it.
func keep(ctx context.Context, front net.Listener) {
	if front != nil {
		go func() {
			for {
				c, err := front.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	<-ctx.Done()
	if front != nil {
		front.Close()
	}
}
