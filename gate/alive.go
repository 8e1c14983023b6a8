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
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		if err := g.tlsPortShared(); err != nil {
			at := time.Now()
			if !g.KillSquid(time.Second) {
				lost(fmt.Errorf("%w at %s: %v; squid could not be stopped (its process is not known)", ErrLost, at.Format("15:04:05"), err))
				<-ctx.Done()
				return
			}
			lost(fmt.Errorf("%w at %s: %v; the gate was stopped", ErrLost, at.Format("15:04:05"), err))
			holdFront(ctx, g, nil)
			return
		}
		if Listening(g.Port) {
			misses = 0
			continue
		}
		if misses++; misses < 2 {
			continue
		}
		holdFront(ctx, g, lost)
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

// holdFront takes the gate's front port, once squid has let it go, until ctx
// ends; lost, when not nil, hears whether it could.
func holdFront(ctx context.Context, g *Gate, lost func(error)) {
	at := time.Now()
	var hold net.Listener
	var err error
	// squid, just killed, may still hold the port for a moment.
	for i := 0; i < 100; i++ {
		if hold, err = net.Listen("tcp", g.Addr()); err == nil || lost != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if lost != nil {
		if err != nil {
			lost(fmt.Errorf("%w at %s (127.0.0.1:%d is no longer its; something else took the port: %v)", ErrLost, at.Format("15:04:05"), g.Port, err))
		} else {
			lost(fmt.Errorf("%w at %s (nothing listens on 127.0.0.1:%d any more)", ErrLost, at.Format("15:04:05"), g.Port))
		}
	}
	if hold != nil {
		go func() {
			for {
				c, err := hold.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	<-ctx.Done()
	if hold != nil {
		hold.Close()
	}
}
