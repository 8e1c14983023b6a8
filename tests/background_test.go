package tests

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is aisb started in the background.
type running struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	code           int
}

// start starts aisb with args in the project directory without waiting.
func (a *aisbUser) start(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	// a.env too (an ssh:// engine's key and known_hosts), as a.run passes it.
	cmd := a.harness().Command(t, ctx, a.containerHost(t), a.env, args...)
	r := &running{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.stdout, r.stderr
	// A child that outlives aisb (an image build's, the watchdog) may hold
	// its output pipes: the wait gives up on them rather than hanging the
	// test (once, under load, until go test's timeout).
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
		}
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// exited reports whether aisb has ended.
func (r *running) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// wait waits for aisb to end.
func (r *running) wait(t *testing.T, within time.Duration) testhost.Result {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(within):
		t.Fatalf("aisb did not end within %s\nstdout: %s\nstderr: %s", within, r.stdout, r.stderr)
	}
	return testhost.Result{Stdout: r.stdout.String(), Stderr: r.stderr.String(), Code: r.code}
}

// waitFor polls cond until it holds or within passes (testhost.WaitFor,
// for a condition with nothing to say but whether it holds).
func waitFor(within time.Duration, cond func() bool) bool {
	return testhost.WaitFor(within, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) == nil
}

var errNotYet = errors.New("not yet")

// stderrSays reports whether aisb's stderr holds all of words.
func (r *running) stderrSays(words ...string) bool {
	s := r.stderr.String()
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
