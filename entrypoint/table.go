package entrypoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/nftables"

	"github.com/aisb-dev/aisb/ruleset"
)

// lastingNft is the production connection: one netlink socket for the
// install and every read-back, rather than one per request (five).
func lastingNft() (*nftables.Conn, error) { return nftables.New(nftables.AsLasting()) }

// installTable installs rs over a connection from nft and reads it back:
// the sandbox's and a pod's init container's one way to the table. needs
// says what a refusal (EPERM) means for the caller's container.
func installTable(nft func() (*nftables.Conn, error), rs *ruleset.Ruleset, needs string, tr *tracer) error {
	conn, err := nft()
	if err != nil {
		return fail("install table", ExitEnforce, err)
	}
	defer conn.CloseLasting()
	if err := rs.Apply(conn); err != nil {
		if errors.Is(err, syscall.EPERM) {
			err = fmt.Errorf("%w (%s)", err, needs)
		}
		return fail("install table", ExitEnforce, err)
	}
	tr.mark("table installed")
	if err := rs.Verify(conn); err != nil {
		return fail("verify table", ExitEnforce, err)
	}
	return nil
}

// awaitFile returns once path exists, looking every millisecond (a stat of
// the read-only policy directory), or fails after wait, or at SIGINT,
// SIGTERM or SIGHUP meanwhile (aisb forwards its own to the sandbox, and
// PID 1 would otherwise ignore them or die without a status).
func awaitFile(path string, wait time.Duration) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Reset(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		_, err := os.Lstat(path)
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", path, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no word from aisb that the gate is ready (%s) within %s", path, wait)
		}
		select {
		case sig := <-sigs:
			return fmt.Errorf("%v while waiting for the gate", sig)
		case <-tick.C:
		}
	}
}
