package gate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// FollowAudit appends the gate's decisions to auditDir/SESSION.jsonl as squid
// writes them, within lim (the oldest audit files go first when all of them
// would exceed lim.Total). stop drains what is left, closes the file and returns the
// first error the follower met (a write that failed: the audit has a gap,
// and the caller must say so).
func FollowAudit(ctx context.Context, g *Gate, auditDir string, lim AuditLimits, logf func(string, ...any)) (stop func() error, err error) {
	if err := os.MkdirAll(auditDir, 0o700); err != nil {
		return nil, fmt.Errorf("audit directory: %w", err)
	}
	path := filepath.Join(auditDir, g.Session+".jsonl")
	if lim.Total > 0 {
		// Room for this session's cap under the total.
		if err := PruneAudit(auditDir, max(lim.Total-lim.Session, 1), path); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit file: %w", err)
	}
	out := CapAudit(f, fi.Size(), lim.Session, g.Session)
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := Follow(fctx, filepath.Join(g.Dir, "access.log"), g.Session, out)
		if err != nil {
			logf("audit of %s stopped: %v", g.Session, err)
		}
		done <- err
	}()
	return func() error {
		cancel()
		err := <-done
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("audit file: %w", cerr)
		}
		return err
	}, nil
}
