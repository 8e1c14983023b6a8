package engine

import (
	"errors"
	"syscall"
	"testing"
	"time"
)

func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestCreateLockWaiter: a create waiting for the create lock gets it as
// soon as its holder lets go, spends no CPU while it waits (it blocks in
// the kernel; a waiter polling every 2 ms spent ~3.6 % of a core), and
// gives up after createLockWait with an error naming the lock, letting go
// of the lock once its abandoned wait gets it.
func TestCreateLockWaiter(t *testing.T) {
	c := &Conn{URI: "unix:///test/podman.sock", lockDir: t.TempDir()}
	unlock, err := c.lockCreate()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		u, err := c.lockCreate()
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		u()
	}()
	before := cpuTime(t)
	time.Sleep(time.Second)
	spent := cpuTime(t) - before
	select {
	case <-got:
		t.Fatal("the waiter got the lock while another held it")
	default:
	}
	released := time.Now()
	unlock()
	if at := <-got; at.IsZero() || at.Sub(released) > 500*time.Millisecond {
		t.Errorf("the waiter got the lock %v after it was let go", at.Sub(released))
	}
	if spent > 10*time.Millisecond {
		t.Errorf("the process spent %v of CPU in the second its create waited for the lock", spent)
	}

	defer func(d time.Duration) { createLockWait = d }(createLockWait)
	createLockWait = 100 * time.Millisecond
	unlock, err = c.lockCreate()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.lockCreate()
	if !errors.Is(err, errCreateLockWait) || time.Since(start) < createLockWait {
		t.Fatalf("a create lock held by another: %v after %v, want errCreateLockWait after %v", err, time.Since(start), createLockWait)
	}
	t.Log(err)
	unlock()
	// The abandoned wait gets the lock and lets it go: the next create
	// gets it.
	var again error
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		var u func()
		if u, again = c.lockCreate(); again == nil {
			u()
			break
		}
	}
	if again != nil {
		t.Errorf("after the holder let go, the lock stays taken: %v", again)
	}
}
