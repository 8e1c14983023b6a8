package engine

// Whether the engine is local: on this host, this process's own user, able
// to see this process's files. aisb bind-mounts its policy, the gate's
// directory and the project from its own filesystem, reads the gate's audit
// as a local file and listens on its own loopback: an engine elsewhere would
// mount another host's paths (or none) and reach another host's loopback
// (issue #29). A session (`aisb run`) takes the decision as its path:
// everything through the API for an engine that is not local (session's
// remote.go); the commands that have no such path refuse one (ErrNotLocal)
// before they create anything.
//
// The decision is made once, in Connect, from what the socket is, never
// from how CONTAINER_HOST spells it: for a unix socket, the credentials of
// the process listening on it (SO_PEERCRED, which the kernel records at
// listen time and cannot be forged by the peer) must be this process's uid
// and a process this process's pid namespace sees, running podman or the
// user's systemd (socket activation); ssh://, tcp:// and any other scheme
// are not local. A same-user forwarder (ssh -L, podman machine's gvproxy)
// is refused by the executable check: it listens for an engine elsewhere.
// It costs one connect and one getsockopt (tens of microseconds, measured
// by BenchmarkDecideLocal), never an API call.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotLocal is what a command that needs a local engine returns for one
// that is not (match with errors.Is).
var ErrNotLocal = errors.New("the podman service is not local")

// Locality is Connect's decision and its reason, for errors and AISB_TRACE.
type Locality struct {
	Local bool
	Why   string
	// unreachable is why the socket could not be asked (nothing listens):
	// a connection failure, not a verdict on the service.
	unreachable error
}

func (l Locality) String() string {
	if l.Local {
		return "local: " + l.Why
	}
	return "not local: " + l.Why
}

// NotLocalError is ErrNotLocal with the service and the reason.
type NotLocalError struct {
	URI string
	Why string
	Env bool // URI is CONTAINER_HOST's
	// Need is why the command needs a local engine (Where.LocalFor); ""
	// says it generally.
	Need string
}

// needLocal is what a command that gives no reason of its own needs.
const needLocal = "this command bind-mounts this host's files or judges containers by this host's processes, which an engine elsewhere would not see"

func (e *NotLocalError) Error() string {
	from := ""
	if e.Env {
		from = " (CONTAINER_HOST)"
	}
	need := e.Need
	if need == "" {
		need = needLocal
	}
	return fmt.Sprintf("podman at %s%s is not local: %s; %s, "+
		"so it needs your own Podman on this host (what works through the API on any engine: docs/remote.md): "+
		"unset CONTAINER_HOST, or set it to your own rootless Podman's socket on this host (unix://$XDG_RUNTIME_DIR/podman/podman.sock)",
		e.URI, from, e.Why, need)
}

func (e *NotLocalError) Is(target error) bool { return target == ErrNotLocal }

// Locality says whether the service Connect reached is local, and why.
func (c *Conn) Locality() Locality { return c.locality }

// RequireLocal is nil for a local service, else a *NotLocalError.
func (c *Conn) RequireLocal() error { return c.locality.require(c.URI, c.uriFromEnv, "") }

func (l Locality) require(uri string, env bool, need string) error {
	if l.Local {
		return nil
	}
	if l.unreachable != nil {
		return fmt.Errorf("connect to podman at %s: %w", uri, l.unreachable)
	}
	return &NotLocalError{URI: uri, Why: l.Why, Env: env, Need: need}
}

// peerCred is who listens on a unix socket.
type peerCred struct {
	PID, UID int
}

// localProbe is what the decision looks at; tests give fakes.
type localProbe struct {
	euid int
	peer func(sock string) (peerCred, error)
	exe  func(pid int) (string, error)
}

var hostProbe = localProbe{euid: os.Geteuid(), peer: socketPeer, exe: procExe}

// localExes are the executables whose socket is a local engine: Podman's
// own service (".podman-wrapped" is Nix's name for it), and systemd's
// (socket activation: systemd listened, Podman serves).
var localExes = []string{"podman", ".podman-wrapped", "systemd"}

// decideLocal is the one decision.
func decideLocal(uri string, p localProbe) Locality {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return Locality{Why: fmt.Sprintf("%q is not a URI", uri)}
	}
	if scheme != "unix" {
		return Locality{Why: fmt.Sprintf("the %s:// scheme reaches a service elsewhere", scheme)}
	}
	sock := rest
	cred, err := p.peer(sock)
	var ue *unreachableError
	if errors.As(err, &ue) {
		return Locality{Why: fmt.Sprintf("nothing answers on %s: %v", sock, ue.err), unreachable: ue.err}
	}
	if err != nil {
		return Locality{Why: fmt.Sprintf("cannot tell who serves %s: %v", sock, err)}
	}
	if cred.UID != p.euid {
		return Locality{Why: fmt.Sprintf("its socket is served by uid %d, not this process's uid %d: another user's Podman cannot see your files, nor you its", cred.UID, p.euid)}
	}
	if cred.PID <= 0 {
		return Locality{Why: "its socket is served from another pid namespace (a container or a machine)"}
	}
	exe, err := p.exe(cred.PID)
	if err != nil {
		return Locality{Why: fmt.Sprintf("cannot tell what serves its socket (pid %d): %v", cred.PID, err)}
	}
	// A service that outlived an upgrade of its binary runs a deleted file.
	name := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
	for _, l := range localExes {
		if name == l {
			return Locality{Local: true, Why: fmt.Sprintf("its socket is served by %s (pid %d) as this process's uid %d", name, cred.PID, cred.UID)}
		}
	}
	return Locality{Why: fmt.Sprintf("its socket is served by %q (pid %d), not by Podman: a forwarder to an engine elsewhere (ssh -L, podman machine)", exe, cred.PID)}
}

// socketPeer connects to sock and reads the listener's credentials
// (peerCreds: SO_PEERCRED on Linux; elsewhere none, so not local). That
// nothing answers is an unreachableError: no verdict.
func socketPeer(sock string) (peerCred, error) {
	conn, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return peerCred{}, &unreachableError{err}
	}
	defer conn.Close()
	return peerCreds(conn.(*net.UnixConn))
}

// unreachableError is a socket nothing answers on.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

func procExe(pid int) (string, error) {
	return os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
}

// decideAndTrace decides and, when traced, says what it decided and what
// deciding cost.
func decideAndTrace(uri string, trace func(string)) Locality {
	start := time.Now()
	l := decideLocal(uri, hostProbe)
	if trace != nil {
		trace(fmt.Sprintf("engine at %s is %s (decided in %.3f ms)", uri, l, float64(time.Since(start).Microseconds())/1000))
	}
	return l
}
