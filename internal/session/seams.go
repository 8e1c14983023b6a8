package session

import (
	"context"
	"time"

	"github.com/aisb-dev/aisb/internal/engine"
)

// podman is the connection a session drives: every Podman call goes through
// engine.Engine, plus what the session does with the connection itself.
// *engine.Conn is the real one; the session's tests give a fake.
type podman interface {
	engine.Engine
	How() string
	Address() string
	Close() error
	Reconnect(ctx context.Context, w engine.Where, within time.Duration) error
	// Locality is Connect's one decision: whether the engine is local
	// (the fast paths) or everything goes through its API (remote.go).
	Locality() engine.Locality
}

// seams are what a session's tests replace: the connection to Podman and
// the session's gate, which a fake Podman cannot bring up (squid must
// listen on the host's loopback). A nil *seams is the real thing.
type seams struct {
	connect  func(ctx context.Context, w engine.Where) (podman, error)
	openGate func(r *run, ctx context.Context) (gater, error)
}

func (s *seams) connectFunc() func(ctx context.Context, w engine.Where) (podman, error) {
	if s == nil || s.connect == nil {
		return func(ctx context.Context, w engine.Where) (podman, error) { return engine.Connect(ctx, w) }
	}
	return s.connect
}

func (s *seams) openGateFunc() func(r *run, ctx context.Context) (gater, error) {
	if s == nil || s.openGate == nil {
		return func(r *run, ctx context.Context) (gater, error) { return r.openGate(ctx) }
	}
	return s.openGate
}

// gater is what a session does with its gate (sessionGate): where the
// sandbox reaches it, waiting until it is ready, watching that it lives,
// and its end, handed to the watchdog or not.
type gater interface {
	port() int
	caCert() []byte
	proxyURL(host string) string
	ready() error
	// watchAlive calls lost when the gate dies, until ctx ends.
	watchAlive(ctx context.Context, lost func(error))
	// finish completes the gate's audit, or hands the gate over to the
	// session's watchdog (handedOff), its secrets and removal included.
	finish(trace func(string)) (handedOff bool, err error)
	// remove removes the gate's container (not after a hand-over).
	remove(trace func(string)) error
}
