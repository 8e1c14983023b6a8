package gate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// FollowAudit appends the gate's decisions to auditDir/SESSION.jsonl as squid
// writes them. stop drains what is left, closes the file and returns the
// first error the follower met (a write that failed: the audit has a gap,
// and the caller must say so).
func FollowAudit(ctx context.Context, g *Gate, auditDir string, logf func(string, ...any)) (stop func() error, err error) {
	if err := os.MkdirAll(auditDir, 0o700); err != nil {
		return nil, fmt.Errorf("audit directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(auditDir, g.Session+".jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := Follow(fctx, filepath.Join(g.Dir, "access.log"), g.Session, f)
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
