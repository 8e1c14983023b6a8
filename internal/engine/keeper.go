package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Keep is the keeper (`aisb internal-podman-service --socket SOCK`): it
// runs `podman system service` on sock, and stops it once no aisb process
// has held its users lock for idle, or when told to stop (SIGTERM, SIGINT,
// ctx). Its own and the service's output go to stdout, capped.
func Keep(ctx context.Context, sock string, idle time.Duration, out io.Writer) error {
	base, ok := strings.CutSuffix(sock, ".sock")
	if !ok {
		return fmt.Errorf("podman service: socket %s does not end in .sock", sock)
	}
	p := sharedPaths(filepath.Dir(base), strings.TrimPrefix(filepath.Base(base), "podman-"))
	users, err := openLock(p.users)
	if err != nil {
		return err
	}
	defer users.Close()
	podman, err := exec.LookPath("podman")
	if err != nil {
		return errors.New("podman service: podman is not on PATH")
	}
	capped := &cappedWriter{w: out, left: logCap}
	// The service dies with the keeper (parent-death signal, which follows
	// the thread that started it: this one, kept for good).
	runtime.LockOSThread()
	cmd := exec.Command(podman, "system", "service", "--time=0", "unix://"+sock)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = capped, capped
	cmd.SysProcAttr = diesWithParent(&syscall.SysProcAttr{})
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("podman service: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sig)
	var idleSince time.Time
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			// Crashed or killed: leave the socket file; the next aisb
			// finds nothing listening and starts another keeper.
			return fmt.Errorf("podman service exited: %v", err)
		case <-ctx.Done():
			stop()
			return nil
		case s := <-sig:
			fmt.Fprintf(capped, "aisb: podman service keeper: %v, stopping the service\n", s)
			stop()
			return nil
		case <-tick.C:
		}
		if unix.Flock(int(users.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			idleSince = time.Time{} // an aisb process is using the service
			continue
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		}
		if time.Since(idleSince) < idle {
			unix.Flock(int(users.Fd()), unix.LOCK_UN)
			continue
		}
		// Idle, and holding the users lock: no client can arrive until
		// the service and its socket are gone.
		fmt.Fprintf(capped, "aisb: podman service keeper: no aisb for %s, stopping the service\n", idle)
		stop()
		os.Remove(sock)
		return nil
	}
}

// cappedWriter passes on the first left bytes and drops the rest.
type cappedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	left int
}

func (c *cappedWriter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(b), c.left)
	if n > 0 {
		c.left -= n
		c.w.Write(b[:n])
	}
	return len(b), nil
}
