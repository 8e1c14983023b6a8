package engine

// aisb's shared Podman service: where no user service listens, one
// `podman system service` per user (and per Podman configuration) serves
// every aisb process, and goes away after SharedIdle without one. A keeper
// process (`aisb internal-podman-service`, Where.Keeper) runs it and decides
// when it is idle; each aisb process holds a shared lock on the service's
// users file from connecting to exiting, so the keeper can never stop the
// service under a client: it stops it only while holding that lock
// exclusively, and a client that arrives then waits, finds no service, and
// starts the next one. Starting is serialised by a second lock, so two aisb
// starting at once start one service. The keeper is detached (own session,
// stdin from /dev/null, its output to a log, working directory /) and
// inherits no descriptor of the aisb that started it (Go opens its files
// close-on-exec, and those aisb inherited without it are marked so before
// the keeper starts), so it holds none of the caller's locks, pipes or
// terminal. Everything lives in the user's runtime directory's aisb
// directory, which must be the user's own and closed to others (0700).

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SharedIdle is how long the shared service lives without any aisb process.
// Starting it costs a session ~270 ms on the 2-core test host (1.7× a bare
// `podman run`), so it outlives a pause of a few minutes between sessions;
// idle it holds ~80 MB resident (the keeper ~25 MB, Podman ~54 MB, of which
// ~17 MB its own: docs/performance.md).
const SharedIdle = 10 * time.Minute

// sharedProtocol names this arrangement of files and locks; a keeper of
// another arrangement never serves this aisb (its files have other names).
const sharedProtocol = "aisb-shared-podman-1"

// logCap bounds the shared service's log.
const logCap = 1 << 20

// sharedFiles are the paths of one shared service.
type sharedFiles struct {
	sock, users, start, log string
}

func sharedPaths(dir, key string) sharedFiles {
	base := filepath.Join(dir, "podman-"+key)
	return sharedFiles{sock: base + ".sock", users: base + ".users", start: base + ".start", log: base + ".log"}
}

// serviceEnv lists the variables that change what a Podman service does;
// services started with different values of any of them are different
// services (so CONTAINERS_CONF_OVERRIDE=… never reaches another's).
func serviceEnv(environ []string) []string {
	exact := []string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME",
		"STORAGE_DRIVER", "STORAGE_OPTS", "REGISTRY_AUTH_FILE", "DOCKER_CONFIG", "DBUS_SESSION_BUS_ADDRESS",
		"SSL_CERT_FILE", "SSL_CERT_DIR", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(exact, k) || strings.HasPrefix(k, "CONTAINERS_") || strings.HasPrefix(k, "PODMAN_") || strings.HasPrefix(k, "BUILDAH_") || strings.HasPrefix(k, "_CONTAINERS_") {
			out = append(out, kv)
		}
	}
	slices.Sort(out)
	return out
}

// sharedKey names the shared service for this Podman binary and this
// environment.
func sharedKey(podman string, environ []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", sharedProtocol, podman)
	if fi, err := os.Stat(podman); err == nil {
		fmt.Fprintf(h, "%d\x00%d\x00", fi.Size(), fi.ModTime().UnixNano())
	}
	for _, kv := range serviceEnv(environ) {
		fmt.Fprintf(h, "%s\x00", kv)
	}
	return hex.EncodeToString(h.Sum(nil)[:6])
}

// privateDir makes sure dir exists as a directory of this user closed to
// everyone else, and refuses one that is not.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("podman service: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("podman service: %w", err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("podman service: %s is not a directory; remove it", dir)
	case int(st.Uid) != os.Getuid():
		return fmt.Errorf("podman service: %s belongs to uid %d, not to you; remove it", dir, st.Uid)
	case st.Mode&0o077 != 0:
		return fmt.Errorf("podman service: %s is open to others (mode %04o); fix it with chmod 700 %s", dir, st.Mode&0o7777, dir)
	}
	return nil
}

// flockWait takes a flock on f, polling until within has passed.
func flockWait(f *os.File, how int, within time.Duration, what string) error {
	for deadline := time.Now().Add(within); ; time.Sleep(2 * time.Millisecond) {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != unix.EWOULDBLOCK || time.Now().After(deadline) {
			return fmt.Errorf("podman service: lock %s: %w", what, err)
		}
	}
}

func openLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("podman service: %w", err)
	}
	return f, nil
}

// useShared makes c a client of the shared service, starting it (through
// w.Keeper) when none listens. c holds the service's users lock until Close.
func (c *Conn) useShared(w Where) error {
	podman, err := exec.LookPath("podman")
	if err != nil {
		return errors.New("start podman service: podman is not on PATH; install rootless Podman 4.4 or newer")
	}
	if abs, err := filepath.EvalSymlinks(podman); err == nil {
		podman = abs
	}
	dir := filepath.Join(w.RuntimeDir, "aisb")
	if err := privateDir(dir); err != nil {
		return err
	}
	p := sharedPaths(dir, sharedKey(podman, os.Environ()))
	users, err := openLock(p.users)
	if err != nil {
		return err
	}
	// Waits while a keeper stops an idle service (it holds the lock
	// exclusively for that, a fraction of a second).
	if err := flockWait(users, unix.LOCK_SH, 30*time.Second, p.users); err != nil {
		users.Close()
		return err
	}
	c.users, c.shared, c.URI = users, true, "unix://"+p.sock
	if listening(p.sock) {
		return nil
	}
	start, err := openLock(p.start)
	if err != nil {
		return err
	}
	defer start.Close()
	if err := flockWait(start, unix.LOCK_EX, time.Minute, p.start); err != nil {
		return err
	}
	if listening(p.sock) {
		return nil // another aisb started it meanwhile
	}
	// Stale: its keeper died. No keeper runs for it (a keeper stops its
	// service only holding the users lock, which we share).
	os.Remove(p.sock)
	return startKeeper(w.Keeper, p)
}

// startKeeper starts the keeper detached and waits for the service.
func startKeeper(argv []string, p sharedFiles) error {
	// Descriptors aisb inherited from its caller without close-on-exec (a
	// shell's or make's pipes) would otherwise pass to the keeper and
	// live on in it: a caller reading such a pipe to its end would wait
	// for the keeper.
	closeOnExecAll()
	cmd := exec.Command(argv[0], append(argv[1:], "--socket", p.sock)...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	log, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("start podman service: %w", err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start podman service: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(20 * time.Second)
	for !listening(p.sock) {
		select {
		case err := <-exited:
			return fmt.Errorf("start podman service: it exited (%v): %s", err, tail(p.log))
		case <-deadline:
			return fmt.Errorf("start podman service: its socket %s did not come up within 20s: %s", p.sock, tail(p.log))
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// closeOnExecAll marks every descriptor above stderr close-on-exec.
func closeOnExecAll() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC)
		}
	}
}

// tail is the end of a log, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = "…" + s[len(s)-600:]
	}
	if s == "" {
		return "(empty log)"
	}
	return s
}
