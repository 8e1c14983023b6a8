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
func WatchAlive(ctx context.Context, g *Gate, every time.Duration, lost func(error)) {
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		if Listening(g.Port) {
			misses = 0
			continue
		}
		if misses++; misses < 2 {
			continue
		}
		at := time.Now()
		hold, err := net.Listen("tcp", g.Addr())
		if err != nil {
			lost(fmt.Errorf("%w at %s (127.0.0.1:%d is no longer its; something else took the port: %v)", ErrLost, at.Format("15:04:05"), g.Port, err))
		} else {
			lost(fmt.Errorf("%w at %s (nothing listens on 127.0.0.1:%d any more)", ErrLost, at.Format("15:04:05"), g.Port))
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
		return
	}
}
