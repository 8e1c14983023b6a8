package gate

import (
	"context"
	"path/filepath"

	"github.com/aisb-dev/aisb/gate/audit"
)

// AccessLog is where the gate's squid writes its access log on the host.
func (g *Gate) AccessLog() string { return filepath.Join(g.Dir, "access.log") }

// FollowAudit appends the gate's decisions to a as squid writes them. stop
// drains what is left and returns the first error the follower met (a write
// that failed: the audit has a gap, and the caller must say so); it does not
// close a.
func FollowAudit(ctx context.Context, g *Gate, a *audit.Audit, logf func(string, ...any)) (stop func() error) {
	return StartFollow(ctx, g, a, 0, logf).Stop
}

// StartFollow is FollowAudit from offset from of the access log: where an
// earlier follower handed off (Follower.Handoff), or 0.
func StartFollow(ctx context.Context, g *Gate, a *audit.Audit, from int64, logf func(string, ...any)) *audit.Follower {
	return audit.StartFollow(ctx, g.AccessLog(), g.Session, a, from, logf)
}
