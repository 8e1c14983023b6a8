package engine

import (
	"context"
	"strings"
	"time"
)

// Alive reports whether the service still answers on its socket.
func (c *Conn) Alive() bool {
	sock, ok := strings.CutPrefix(c.URI, "unix://")
	if !ok {
		return true // a remote service: the next call will say
	}
	return listening(sock)
}

// Reconnect waits until a service answers again (up to within) and makes c
// a connection to it, so that whatever holds c can finish its cleanup.
func (c *Conn) Reconnect(ctx context.Context, w Where, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		nc, err := Connect(ctx, w)
		if err == nil {
			old := c.users
			if c.tunnel != nil {
				c.tunnel.Close() // nc has its own
			}
			*c = *nc
			if old != nil {
				old.Close() // nc holds the shared service's lock now
			}
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
