package state

import (
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// A session that ends leaves its finish to its watchdog: squid killed, the
// audit completed, the gate and the sandbox removed (Podman's removal and
// its cleanup processes, some 0.3-0.4 s of CPU on the 2-core test host). A
// session started at that moment shared the CPU with it and took 1.8× as
// long. So each session holds a shared lock on starting.lock while it
// starts, and a watchdog waits (a bounded time) until none does before it
// finishes. It is a matter of scheduling, not of safety: where the lock
// cannot be had, nobody waits.

const startingName = "starting.lock"

// Starting marks, until release is called, that a session of this user is
// starting.
func (p Paths) Starting() (release func()) {
	f, err := openStarting(p)
	if err != nil {
		return func() {}
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_SH) != nil {
		f.Close()
		return func() {}
	}
	return func() { f.Close() }
}

// WaitNoStart waits until no session of this user is starting, at most
// max, polling without ever holding a starting session up: the exclusive
// lock is only tried, and let go at once.
func (p Paths) WaitNoStart(max time.Duration) {
	f, err := openStarting(p)
	if err != nil {
		return
	}
	defer f.Close()
	for deadline := time.Now().Add(max); ; time.Sleep(20 * time.Millisecond) {
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			unix.Flock(int(f.Fd()), unix.LOCK_UN)
			return
		}
		if time.Now().After(deadline) {
			return
		}
	}
}

func openStarting(p Paths) (*os.File, error) {
	if p.Runtime == "" {
		return nil, os.ErrNotExist
	}
	dir := p.LockDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, startingName), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
}
