// Package engine is aisb's one way to Podman: the Engine interface and Conn, which implements it over the API bindings, starting a private `podman system service` when nothing listens.
package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/blang/semver/v4"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/errorhandling"
	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"
)

// MinVersion is the oldest Podman service aisb drives; pasta needs MinPasta.
var (
	MinVersion = semver.MustParse("4.0.0")
	MinPasta   = semver.MustParse("4.4.0")
	// MinEmptyDetachKeys is the first service that accepts "" (no detach keys).
	MinEmptyDetachKeys = semver.MustParse("5.0.0")
)

// Labels aisb puts on its containers.
const (
	LabelKind    = "io.aisb.kind"    // "gate", "sandbox", or "prepare" (image.prepare's, never started)
	LabelSession = "io.aisb.session" // session id, or the gate's name for a long-lived gate
	LabelOwner   = "io.aisb.owner"   // "PID:STARTTIME" of the aisb process that owns it; absent for long-lived gates
	// LabelFinisher is "PID:STARTTIME" of the session's watchdog, which
	// removes a session's gate and exited sandbox after their owner exits:
	// not reaped while it lives.
	LabelFinisher = "io.aisb.finisher"
)

// Conn is a live connection to a Podman service; it implements Engine
// (calls.go).
type Conn struct {
	// Ctx carries the bindings' connection, which every Engine call binds
	// to (Conn.bind).
	Ctx     context.Context
	URI     string
	Version semver.Version
	private *exec.Cmd     // the service aisb started, if any
	exited  chan struct{} // closed when the private service has exited
	sock    string
	lockDir string   // where the per-service create lock lives
	runDir  string   // the user's runtime directory, for a service on a unix socket
	shared  bool     // aisb's shared service (see shared.go)
	users   *os.File // held (shared lock) while this process uses it
	arch    string   // the engine's architecture, once known (arch.go)
	// locality is whether the service is local (local.go), decided in
	// Connect; uriFromEnv says URI is Where.URI (CONTAINER_HOST).
	locality   Locality
	uriFromEnv bool
	tunnel     *sshTunnel // an ssh:// engine's connection (ssh.go)
}

// Where says how to reach Podman; the caller reads the environment once.
type Where struct {
	URI        string // CONTAINER_HOST; empty: the user's socket, else aisb's shared service
	RuntimeDir string // the user's runtime directory (state.Paths.Runtime)
	// Keeper is the command that keeps aisb's shared service (`aisb
	// internal-podman-service`, which runs Keep); without one, a private
	// service per process.
	Keeper []string
	// RequireLocal refuses a service that is not local (local.go) with
	// ErrNotLocal, before any API call; Trace, if set, is told the decision.
	RequireLocal bool
	// LocalFor is why the command needs a local engine, for the error
	// (NotLocalError.Need); "": said generally.
	LocalFor string
	Trace    func(string)
	// SSH is how an ssh:// URI is reached (ssh.go): keys and known_hosts.
	SSH SSHConfig
}

// Connect uses w.URI, else the user's rootless socket, else aisb's shared
// service (started through w.Keeper when none listens; see shared.go),
// else, without a keeper, starts `podman system service` privately for
// this process, which exits with aisb (parent-death signal) and on Close.
// It decides whether that service is local (local.go) before any API call,
// and with w.RequireLocal refuses one that is not (ErrNotLocal).
func Connect(ctx context.Context, w Where) (*Conn, error) {
	c := &Conn{}
	c.arch, _ = HostArch(w)
	if w.RuntimeDir != "" {
		c.lockDir = filepath.Join(w.RuntimeDir, "aisb")
	}
	switch {
	case w.URI != "":
		c.URI = w.URI
	default:
		runtimeDir := w.RuntimeDir
		sock := filepath.Join(runtimeDir, "podman", "podman.sock")
		if listening(sock) {
			c.URI = "unix://" + sock
			break
		}
		if len(w.Keeper) > 0 {
			if err := c.useShared(w); err != nil {
				c.Close()
				return nil, err
			}
			break
		}
		if err := c.startPrivate(runtimeDir); err != nil {
			return nil, err
		}
	}
	c.uriFromEnv = w.URI != ""
	c.locality = decideAndTrace(c.URI, w.Trace)
	if w.RequireLocal {
		if err := c.locality.require(c.URI, c.uriFromEnv, w.LocalFor); err != nil {
			c.Close()
			return nil, err
		}
	}
	dial := c.URI
	if strings.HasPrefix(c.URI, "ssh://") {
		start := time.Now()
		dir := c.lockDir
		tun, err := dialSSH(ctx, c.URI, w.SSH, dir)
		if err != nil {
			return nil, fmt.Errorf("connect to podman at %s: %w", c.URI, err)
		}
		c.tunnel = tun
		dial = "unix://" + tun.sock
		if w.Trace != nil {
			w.Trace(fmt.Sprintf("engine at %s reached over ssh (host key checked against known_hosts) in %.1f ms", c.URI, float64(time.Since(start).Microseconds())/1000))
		}
	}
	bctx, err := bindings.NewConnection(ctx, dial)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("connect to podman at %s: %w", c.URI, err)
	}
	c.Ctx = bctx
	// The user's own Podman: found by aisb, or named by a CONTAINER_HOST
	// socket in the user's runtime directory (ssh:// and sockets elsewhere
	// are a Podman whose paths need not be this host's), and local by the
	// one decision (local.go): a forwarder's socket there is not.
	if sock, ok := strings.CutPrefix(c.URI, "unix://"); ok && w.RuntimeDir != "" && c.locality.Local &&
		(w.URI == "" || strings.HasPrefix(filepath.Clean(sock), filepath.Clean(w.RuntimeDir)+"/")) {
		c.runDir = w.RuntimeDir
	}
	v := bindings.ServiceVersion(bctx)
	if v == nil || v.LT(MinVersion) {
		c.Close()
		return nil, fmt.Errorf("connect to podman at %s: the service is version %v; aisb needs Podman %s or newer", c.URI, v, MinVersion)
	}
	c.Version = *v
	return c, nil
}

// ServiceUID is the uid owning the service's unix socket, where the service
// is reached by one: the user whose rootless Podman it is, so the host uid
// its containers' users map to (keep-id) and own their sockets as. A socket
// forwarded from elsewhere cannot be told apart; what relies on this checks
// what it sees (gate: the listeners' uids).
func (c *Conn) ServiceUID() (int, bool) {
	sock, ok := strings.CutPrefix(c.URI, "unix://")
	if !ok {
		return 0, false
	}
	fi, err := os.Stat(sock)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// SameUser reports whether the service is a Podman of this process's own
// non-root user (ServiceUID): its rootless containers' users map to this
// process's uid, and a container with the host's network shares this
// process's. A remote or another user's service (the tests' root process
// using the test user's) is not.
func (c *Conn) SameUser() bool {
	uid, ok := c.ServiceUID()
	return ok && uid != 0 && uid == os.Geteuid()
}

func listening(sock string) bool {
	conn, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

func (c *Conn) startPrivate(runtimeDir string) error {
	podman, err := exec.LookPath("podman")
	if err != nil {
		return errors.New("start podman service: podman is not on PATH; install rootless Podman 4.4 or newer")
	}
	dir := filepath.Join(runtimeDir, "aisb")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("start podman service: %w", err)
	}
	c.sock = filepath.Join(dir, fmt.Sprintf("podman-%d.sock", os.Getpid()))
	os.Remove(c.sock)
	c.URI = "unix://" + c.sock
	cmd := exec.Command(podman, "system", "service", "--time=0", c.URI)
	// The service's own log is noise to a user (its errors come back through
	// the API); keep it beside the socket for debugging.
	if f, err := os.Create(strings.TrimSuffix(c.sock, ".sock") + ".log"); err == nil {
		cmd.Stdout, cmd.Stderr = f, f
		defer f.Close()
	}
	cmd.SysProcAttr = diesWithParent(&syscall.SysProcAttr{Setpgid: true})
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start podman service: %w", err)
	}
	c.private = cmd
	c.exited = make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(c.exited) }()
	deadline := time.After(20 * time.Second)
	for !listening(c.sock) {
		select {
		case <-c.exited:
			c.private = nil
			return fmt.Errorf("start podman service: it exited: %v", waitErr)
		case <-deadline:
			c.Close()
			return errors.New("start podman service: its socket did not come up within 20s")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// LocalRuntimeDir is the user's runtime directory when Podman is the user's
// own on this host (aisb's service, or the user's socket there); callers
// still treat what they find through it as a shortcut to verify, never as
// fact. Empty otherwise.
func (c *Conn) LocalRuntimeDir() string { return c.runDir }

// Private reports whether aisb started the service itself, for itself.
func (c *Conn) Private() bool { return c.private != nil }

// Shared reports whether this is aisb's shared service.
func (c *Conn) Shared() bool { return c.shared }

// How says which service this is, for traces and doctor.
func (c *Conn) How() string {
	switch {
	case c.Private():
		return "a private service aisb started"
	case c.Shared():
		return "aisb's shared service, which stops after 10 minutes unused"
	}
	return "the user's service"
}

// Close stops the private service, if aisb started one, and lets go of
// the shared one.
func (c *Conn) Close() error {
	if c.users != nil {
		c.users.Close()
		c.users = nil
	}
	if c.private != nil && c.private.Process != nil {
		c.private.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(3 * time.Second):
			c.private.Process.Kill()
			<-c.exited
		}
		c.private = nil
	}
	if c.tunnel != nil {
		c.tunnel.Close()
		c.tunnel = nil
	}
	if c.sock != "" {
		os.Remove(c.sock)
		os.Remove(strings.TrimSuffix(c.sock, ".sock") + ".log")
	}
	return nil
}

// RequirePasta fails with a clear message when the service is too old for pasta.
func (c *Conn) RequirePasta() error { return RequirePastaOf(c.Version) }

// RequirePastaOf is RequirePasta of a service of version v.
func RequirePastaOf(v semver.Version) error {
	if v.LT(MinPasta) {
		return fmt.Errorf("podman %s has no pasta network mode (needs %s); use slirp4netns or upgrade Podman", v, MinPasta)
	}
	return nil
}

// IsNotFound reports whether err is the service's answer 404: no such
// container, image or volume.
func IsNotFound(err error) bool {
	var em *errorhandling.ErrorModel
	return errors.As(err, &em) && em.ResponseCode == http.StatusNotFound
}

// Remove force-removes a container (SIGTERM, SIGKILL after 2 s); a missing
// one is no error.
func Remove(ctx context.Context, e Engine, name string) error {
	timeout := uint(2)
	err := e.ContainerRemove(ctx, name, RemoveOptions{Force: true, Timeout: &timeout, Ignore: true})
	if err != nil && !IsNotFound(err) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

// RunOnce runs argv in image with no network and no capabilities, hostDir
// mounted read-write at mountPoint, and returns its exit status.
func RunOnce(ctx context.Context, e Engine, image, hostDir, mountPoint string, argv []string) (int, error) {
	s := specgen.NewSpecGenerator(image, false)
	s.Entrypoint, s.Command = argv[:1], argv[1:]
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	s.CapDrop = []string{"ALL"}
	userns, err := specgen.ParseUserNamespace("keep-id")
	if err != nil {
		return 0, err
	}
	s.UserNS = userns
	s.Mounts = []spec.Mount{{Type: "bind", Source: hostDir, Destination: mountPoint, Options: []string{"rw"}}}
	resp, err := e.ContainerCreate(ctx, s)
	if err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	defer Remove(ctx, e, resp.ID)
	if err := e.ContainerStart(ctx, resp.ID); err != nil {
		return 0, fmt.Errorf("start: %w", err)
	}
	code, err := e.ContainerWait(ctx, resp.ID)
	return int(code), err
}

// Address is where the service listens (its URI).
func (c *Conn) Address() string { return c.URI }
