// The gate container's life: its options, creation, start, stop and the
// view of one already running. Its parts: ports.go chooses the ports,
// tlsfiles.go writes its files, spec.go is its container, ready.go waits
// for squid, sockets.go reads the socket table, hold.go holds the TLS port.

// Package gate runs the egress gate, a squid on the host's loopback that admits allowlisted names only.
package gate

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/image"
)

//go:embed Containerfile
var containerfile []byte

// ImageSpec is the gate image on base.
func ImageSpec(base string) image.Spec {
	return image.Spec{Name: "aisb-gate", Containerfile: containerfile, BaseImage: base, UserNS: userNS}
}

// Options start one gate.
type Options struct {
	Session   string           // session id or long-lived gate name
	Dir       string           // the session directory on the host (created if missing)
	Image     string           // the gate image (from image.Ensure(ImageSpec(...)))
	Allowlist []allowlist.Host // validated
	SSHHosts  []allowlist.Host // validated names SSH may reach on port 22
	DNS       []netip.Addr
	Owner     string // engine.LabelOwner value; empty for a long-lived gate
	// HelperDir, when set, holds squidconf.HelperProgram and the session's helper
	// socket; it is mounted read-only at /ask and the gate asks through it
	// about names its list does not hold.
	HelperDir string
	// Credentials the gate sets for their hosts (see squidconf.Credential); their
	// values reach squid.conf only, which only the gate can read.
	Credentials []squidconf.Credential
	// UpstreamCAs are PEM files of CAs bumped upstreams may chain to, besides
	// the host's trust store (network.upstream_ca of the user's config).
	UpstreamCAs []string
	// Finisher is the session's watchdog ("PID:STARTTIME"), which may
	// finish the gate after its owner exits (engine.LabelFinisher).
	Finisher string
	// Remote, set for an engine that is not local, makes the gate go
	// through the API alone (remote.go); nil: a local gate.
	Remote *Remote
}

// Gate is a running gate. Create (with Start and Up) makes it, Find finds a
// long-lived one, Running describes one another process started; its
// fields are set there and only read after.
type Gate struct {
	Name    string // container name: ContainerName(Session)
	Session string
	Port    int    // on the host's 127.0.0.1: the front, the sandbox's one way out
	TLSPort int    // on the host's 127.0.0.1: where the front hands tunnels to 443; 0 when unknown (a gate found running)
	Dir     string // the session directory: squid.conf, access.log, cache.log

	// token proves the sandbox to the gate (ProxyURL); "" in a view of a
	// gate another process started (Running), which never proxies.
	token string
	// caCert is the session CA (PEM) the sandbox must trust for credential
	// hosts; nil when the gate bumps nothing.
	caCert []byte
	// squid is squid's host process as "PID:STARTTIME" once Open saw it
	// ready, so that it can be killed without asking Podman (KillSquid).
	squid string

	hold *portHold // the TLS port, held by aisb until squid has checked it (hold.go)
	// squidUID is squid's uid on the host (the owner of Podman's socket),
	// where it is known: a listener on the gate's ports of another uid is
	// not the gate.
	squidUID int
	uidKnown bool

	// remote is the engine of a gate on an engine that is not local
	// (remote.go), nil for a local gate; logs follows its logs.
	remote engine.Engine
	logs   *remoteLogs
	relay  *relay // a remote gate's question path (bridge.go); nil without one
}

// CACert is the session CA (PEM) the sandbox must trust for credential
// hosts; nil when the gate bumps nothing.
func (g *Gate) CACert() []byte { return g.caCert }

// Squid is squid's host process as "PID:STARTTIME" once Open saw it ready
// (or as handed over, see Running); "" when not known.
func (g *Gate) Squid() string { return g.squid }

// Known is what a process that did not start a gate knows of it: the
// session's watchdog, from what the session handed over, and a long-lived
// gate's follower, from its command line.
type Known struct {
	Session string // session id or long-lived gate name
	Dir     string // the gate's directory on the host
	Port    int    // the front
	TLSPort int    // 0 when not known
	Squid   string // squid's host process as "PID:STARTTIME"; "" when not known
}

// ErrKnown wraps what is wrong with a Known.
var ErrKnown = errors.New("not a running gate")

// Running is the gate k describes, started by another process; it refuses
// a name or ports no gate has.
func Running(k Known) (*Gate, error) {
	switch {
	case !squidconf.ValidSession(k.Session):
		return nil, fmt.Errorf("gate %q: %w: the name", k.Session, ErrKnown)
	case k.Dir == "":
		return nil, fmt.Errorf("gate %s: %w: no directory", k.Session, ErrKnown)
	case k.Port < 1 || k.Port > 65535:
		return nil, fmt.Errorf("gate %s: %w: port %d", k.Session, ErrKnown, k.Port)
	case k.TLSPort < 0 || k.TLSPort > 65535 || k.TLSPort == k.Port:
		return nil, fmt.Errorf("gate %s: %w: TLS port %d", k.Session, ErrKnown, k.TLSPort)
	}
	return &Gate{Name: ContainerName(k.Session), Session: k.Session, Port: k.Port, TLSPort: k.TLSPort, Dir: k.Dir, squid: k.Squid}, nil
}

// ContainerName is the gate container's name for a session.
func ContainerName(session string) string { return "aisb-gate-" + session }

// Start renders squid.conf for a free loopback port, runs the gate container
// and waits until the port accepts connections. On any failure nothing is
// left running.
func Start(c engine.Engine, o Options) (*Gate, error) {
	g, err := Create(c, o)
	if err != nil {
		return nil, err
	}
	if err := g.Open(c); err != nil {
		return nil, err
	}
	return g, nil
}

// Create renders squid.conf for a free loopback port and creates the gate
// container without starting it: the port is known (a session policy can
// name it) before anything listens there. Open starts it. On failure
// nothing is left.
func Create(c engine.Engine, o Options) (*Gate, error) {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	if o.Remote != nil {
		return createRemote(c, o)
	}
	hold, port, tlsPort, err := choosePorts(c.SameUser())
	if err != nil {
		return nil, fmt.Errorf("start gate: find a free port: %w", err)
	}
	g, err := create(c, o, hold, port, tlsPort)
	if err != nil {
		hold.release()
		return nil, err
	}
	return g, nil
}

// create is Create once the ports are chosen (the TLS port held, where it
// can be): the gate's files, its container's spec, the container.
func create(c engine.Engine, o Options, hold *portHold, port, tlsPort int) (*Gate, error) {
	tokens, err := newTokens()
	if err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	caCert, err := writeFiles(o, port, tlsPort, tokens)
	if err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	s, err := Spec(o)
	if err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	g := &Gate{Name: s.Name, Session: o.Session, Port: port, TLSPort: tlsPort, Dir: o.Dir, hold: hold, token: tokens.Sandbox}
	g.squidUID, g.uidKnown = squidUID(c)
	if len(o.Credentials) > 0 {
		g.caCert = caCert
	}
	if _, err := c.ContainerCreate(context.TODO(), s); err != nil {
		return nil, fmt.Errorf("start gate: create %s: %w", g.Name, err)
	}
	return g, nil
}

// squidUID is squid's uid on the host, the owner of Podman's socket, where
// it is known. A rootless Podman's: where its user is root, the gate's
// proxy user is not root's uid on the host, and not checked.
func squidUID(c engine.Engine) (int, bool) {
	uid, ok := c.ServiceUID()
	return uid, ok && uid != 0
}

// Open starts the created gate and returns once squid listens on its port.
// On failure the gate is removed.
func (g *Gate) Open(c engine.Engine) error {
	if g.remote != nil {
		return g.openRemote(c, 20*time.Second)
	}
	defer g.hold.release()
	if err := c.ContainerStart(context.TODO(), g.Name); err != nil {
		return errors.Join(fmt.Errorf("start gate: %w", err), g.Stop(c))
	}
	if err := g.waitReady(c, 20*time.Second); err != nil {
		return errors.Join(err, g.Stop(c))
	}
	return nil
}

func (g *Gate) running(c engine.Engine) bool {
	_, ok := g.pid(c)
	return ok
}

// pid is the host process id of the running gate's squid (0 when Podman
// does not say), and whether it runs.
func (g *Gate) pid(c engine.Engine) (int, bool) {
	data, err := c.ContainerInspect(context.TODO(), g.Name)
	if err != nil || data.State == nil || !data.State.Running {
		return 0, false
	}
	return data.State.Pid, true
}

// Addr is the gate's address on the host.
func (g *Gate) Addr() string { return fmt.Sprintf("127.0.0.1:%d", g.Port) }

// Stop ends the gate. squid's own shutdown takes over 1.5 s even on SIGINT,
// and would only close connections: its access log is unbuffered. So once it
// has logged what its clients did (Quiesce, at most 1 s), the gate is killed
// and removed.
func (g *Gate) Stop(c engine.Engine) error {
	g.Quiesce(time.Second)
	return g.Kill(c)
}

// Kill kills and removes the gate at once.
func (g *Gate) Kill(c engine.Engine) error {
	g.hold.release()
	g.relay.stop()
	// A kill that fails because the gate is already gone is fine: Remove
	// below is what must succeed, and it reports its own failure.
	_ = c.ContainerKill(context.TODO(), g.Name, "KILL")
	err := engine.Remove(context.TODO(), c, g.Name)
	// A remote gate's log stream ends with its container.
	g.logsEnded(5 * time.Second)
	g.closeLogs()
	return err
}
