// This file is some 390 lines: the gate container's whole life (its files,
// two ports, start, readiness, stop) kept together; what the socket table
// says of its ports is in sockets.go, aisb's hold of the TLS port in hold.go.

package gate

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/netaddr"
	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/state"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

//go:embed Containerfile
var containerfile []byte

// ImageSpec is the gate image on base.
func ImageSpec(base string) image.Spec {
	return image.Spec{Name: "aisb-gate", Containerfile: containerfile, BaseImage: base, UserNS: userNS}
}

// userNS is the gate's user namespace: squid runs as Debian's proxy user,
// which is the host user.
var userNS = fmt.Sprintf("keep-id:uid=%d,gid=%d", proxyUID, proxyUID)

// dirInContainer is where the session directory is mounted in the gate.
const dirInContainer = "/gate"

// proxyUID is Debian's proxy user, which the gate runs as.
const proxyUID = 13

// Options start one gate.
type Options struct {
	Session   string           // session id or long-lived gate name
	Dir       string           // the session directory on the host (created if missing)
	Image     string           // the gate image (from image.Ensure(ImageSpec(...)))
	Allowlist []allowlist.Host // validated
	SSHHosts  []allowlist.Host // validated names SSH may reach on port 22
	DNS       []netip.Addr
	Owner     string // engine.LabelOwner value; empty for a long-lived gate
	// HelperDir, when set, holds HelperProgram and the session's helper
	// socket; it is mounted read-only at /ask and the gate asks through it
	// about names its list does not hold.
	HelperDir string
	// Credentials the gate sets for their hosts (see Credential); their
	// values reach squid.conf only, which only the gate can read.
	Credentials []Credential
	// UpstreamCAs are PEM files of CAs bumped upstreams may chain to, besides
	// the host's trust store (network.upstream_ca of the user's config).
	UpstreamCAs []string
	// Finisher is the session's watchdog ("PID:STARTTIME"), which may
	// finish the gate after its owner exits (engine.LabelFinisher).
	Finisher string
}

// Where a session gate finds its helper, in HelperDir.
const (
	HelperProgram = "aisb-gatehelper"
	HelperSocket  = "helper.sock"
	helperMount   = "/ask"
)

// Gate is a running gate.
type Gate struct {
	Name    string // container name
	Session string
	Port    int    // on the host's 127.0.0.1: the front, the sandbox's one way out
	TLSPort int    // on the host's 127.0.0.1: where the front hands tunnels to 443; 0 when unknown (a gate found running)
	Dir     string // the session directory: squid.conf, access.log, cache.log
	// CACert is the session CA (PEM) the sandbox must trust for credential
	// hosts; nil when the gate bumps nothing.
	CACert []byte
	// Squid is squid's host process as "PID:STARTTIME" once Open saw it
	// ready, so that it can be killed without asking Podman (KillSquid).
	Squid string

	hold *portHold // the TLS port, held by aisb until squid has checked it (hold.go)
	// squidUID is squid's uid on the host (the owner of Podman's socket),
	// where it is known: a listener on the gate's ports of another uid is
	// not the gate.
	squidUID int
	uidKnown bool
}

// ContainerName is the gate container's name for a session.
func ContainerName(session string) string { return "aisb-gate-" + session }

// freePort asks the kernel for a free port on 127.0.0.1.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

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
	host, err := netaddr.HostAddrs()
	if err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	// The TLS port first: held, it cannot be the front's port too. Only a
	// Podman of this uid runs squid as this uid, in this network (hold.go).
	var hold *portHold
	var tlsPort int
	if c.SameUser() {
		hold, tlsPort, err = holdPort()
	} else {
		tlsPort, err = freePort()
	}
	if err != nil {
		return nil, fmt.Errorf("start gate: find a free port: %w", err)
	}
	g, err := create(c, o, host, hold, tlsPort)
	if err != nil {
		hold.release()
		return nil, err
	}
	return g, nil
}

// create is Create once the TLS port is chosen (and held, where it can be).
func create(c engine.Engine, o Options, host netaddr.Host, hold *portHold, tlsPort int) (*Gate, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start gate: find a free port: %w", err)
	}
	for err == nil && port == tlsPort {
		port, err = freePort()
	}
	if err != nil {
		return nil, fmt.Errorf("start gate: find a free port: %w", err)
	}
	cfg := Config{Session: o.Session, Port: port, TLSPort: tlsPort, Dir: dirInContainer, Allowlist: o.Allowlist, SSHHosts: o.SSHHosts, DNS: o.DNS, Host: host}
	if o.HelperDir != "" {
		cfg.Helper = &Helper{Program: helperMount + "/" + HelperProgram, Socket: helperMount + "/" + HelperSocket}
	}
	// A stale pid file (a killed gate) stops the next squid from starting.
	for _, f := range []string{"access.log", "cache.log", "squid.pid"} {
		os.Remove(filepath.Join(o.Dir, f))
	}
	caCert, defaultCA, err := WriteTLSFiles(o.Dir, o.Credentials, o.UpstreamCAs)
	if err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	cfg.Credentials, cfg.DefaultCA = o.Credentials, defaultCA
	conf, err := Render(cfg)
	if err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	// squid.conf may hold credentials: readable by the gate's user alone
	// (the host user, mapped to proxy inside the gate), and never written
	// through a link (squid can write its directory).
	if err := writePrivate(filepath.Join(o.Dir, "squid.conf"), []byte(conf)); err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	g := &Gate{Name: ContainerName(o.Session), Session: o.Session, Port: port, TLSPort: tlsPort, Dir: o.Dir, hold: hold}
	// A rootless Podman's: where its user is root, the gate's proxy user
	// is not root's uid on the host, and not checked.
	g.squidUID, g.uidKnown = c.ServiceUID()
	g.uidKnown = g.uidKnown && g.squidUID != 0
	if len(o.Credentials) > 0 {
		g.CACert = caCert
	}

	s := specgen.NewSpecGenerator(o.Image, false)
	s.Name = g.Name
	// With credentials, squid's certificate store is already there
	// (WriteTLSFiles).
	s.Command = []string{"squid", "-N", "-f", dirInContainer + "/squid.conf"}
	// SIGINT makes squid close its connections and exit at once; SIGTERM
	// waits shutdown_lifetime and often outlasts podman's stop timeout.
	s.StopSignal = ptr(syscall.SIGINT)
	s.NetNS = specgen.Namespace{NSMode: specgen.Host}
	userns, err := specgen.ParseUserNamespace(userNS)
	if err != nil {
		return nil, fmt.Errorf("start gate: %w", err)
	}
	s.UserNS = userns
	s.User = "proxy"
	s.CapDrop = []string{"ALL"}
	s.NoNewPrivileges = ptr(true)
	s.ReadOnlyFilesystem = ptr(true)
	s.ReadWriteTmpfs = ptr(true)
	s.Mounts = []spec.Mount{{Type: "bind", Source: o.Dir, Destination: dirInContainer, Options: []string{"rw"}}}
	if o.HelperDir != "" {
		// Read-only: squid (the user's uid on the host) can connect to the
		// socket but replace neither it nor the helper.
		s.Mounts = append(s.Mounts, spec.Mount{Type: "bind", Source: o.HelperDir, Destination: helperMount, Options: []string{"ro"}})
	}
	s.Labels = map[string]string{engine.LabelKind: "gate", engine.LabelSession: o.Session}
	if o.Owner != "" {
		s.Labels[engine.LabelOwner] = o.Owner
	}
	if o.Finisher != "" {
		s.Labels[engine.LabelFinisher] = o.Finisher
	}
	if _, err := c.ContainerCreate(context.TODO(), s); err != nil {
		return nil, fmt.Errorf("start gate: create %s: %w", g.Name, err)
	}
	return g, nil
}

// Open starts the created gate and returns once squid listens on its port.
// On failure the gate is removed.
func (g *Gate) Open(c engine.Engine) error {
	defer g.hold.release()
	if err := c.ContainerStart(context.TODO(), g.Name); err != nil {
		return errors.Join(fmt.Errorf("start gate: %w", err), g.Stop(c))
	}
	if err := g.waitReady(c, 20*time.Second); err != nil {
		return errors.Join(err, g.Stop(c))
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// waitReady waits until squid listens on both ports (its pid file appears
// before the listeners) and has found its TLS port up, while the container
// is still running. It reads the kernel's socket table rather than
// connecting, so that readiness leaves no line in the audit log. Until
// squid's own check of its TLS port succeeded, squid takes that port for
// down and would fail a tunnel to 443: listening alone is not ready. The
// check is seen where it lands: at aisb's hold of the port (hold.go) or in
// the access log, as a line the audit drops (isSelfCheck). The
// table and the log are read every few milliseconds (both are cheap); the
// service is asked whether squid still runs only now and then, and once
// more when it is ready, which records squid's process.
//
// The service can take long to answer: right after the pi image was built,
// while the first sandbox of it started beside the gate, asking whether
// squid runs took 20.5 s on a 2-core VM (the gate was ready within 0.6 s;
// every CI run from nothing failed TestCredentialsPiHarness so). So the
// deadline is checked right after the table, never right after a question
// to the service: a gate that became ready while the service kept aisb
// waiting is ready.
func (g *Gate) waitReady(c engine.Engine, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		// tlsPortUp lets go of the hold first: only squid's own
		// listeners are left to see.
		if g.tlsPortUp() && g.squidListening() {
			if pid, ok := g.pid(c); ok {
				if pid > 0 {
					g.Squid = state.OwnerOf(pid)
				}
				return nil
			}
			return fmt.Errorf("start gate: squid exited: %s", g.squidError())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start gate: not ready within %s (%s): %s", timeout, g.notReady(), g.squidError())
		}
		if i%50 == 49 && !g.running(c) {
			return fmt.Errorf("start gate: squid exited: %s", g.squidError())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// notReady says which of waitReady's conditions is unmet, with what the
// socket table shows on the gate's ports, so that a gate that never became
// ready says why.
func (g *Gate) notReady() string {
	var why []string
	atHold, inLog := g.hold.sawCheck(), g.tlsPortChecked()
	if !atHold && !inLog {
		why = append(why, "squid's check of its TLS port was not seen")
	} else {
		why = append(why, fmt.Sprintf("squid's check seen at aisb's hold: %t, in the access log: %t", atHold, inLog))
	}
	if g.hold.held() {
		why = append(why, fmt.Sprintf("aisb still holds the TLS port (it took %d connections, squid's check %s after it was made)", g.hold.conns.Load(), g.hold.checkDelay()))
	}
	l, err := listeners()
	if err != nil {
		return strings.Join(append(why, fmt.Sprintf("socket table: %v", err)), "; ")
	}
	if g.uidKnown {
		why = append(why, fmt.Sprintf("squid's uid %d", g.squidUID))
	}
	why = append(why, fmt.Sprintf("listener uids on 127.0.0.1:%d %v, on :%d %v", g.Port, l[g.Port], g.TLSPort, l[g.TLSPort]))
	return strings.Join(why, "; ")
}

// tlsPortUp reports whether squid has found its TLS port up (its check
// reached the hold or squid's own listener) and the hold is gone. The hold
// is released only once squid's own listener has joined it, so the port is
// never free for another user's socket to take.
func (g *Gate) tlsPortUp() bool {
	if !g.hold.sawCheck() && !g.tlsPortChecked() {
		return false
	}
	if g.hold.held() {
		if !g.squidJoinedHold() {
			return false
		}
		g.hold.release()
	}
	return true
}

// tlsPortChecked reports whether the access log holds squid's check of its
// TLS port (the front hands no tunnel over before that check succeeded).
func (g *Gate) tlsPortChecked() bool {
	b, err := safefile.Read(filepath.Join(g.Dir, "access.log"), 1<<20)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if e, err := ParseLine(l); errors.Is(err, ErrBookkeeping) && isSelfCheck(e) {
			return true
		}
	}
	return false
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

// squidError is squid's own complaint from cache.log: its FATAL/ERROR lines,
// or the last lines.
func (g *Gate) squidError() string {
	b, err := safefile.Read(filepath.Join(g.Dir, "cache.log"), 1<<20)
	if err != nil {
		return fmt.Sprintf("cache.log: %v", err)
	}
	var bad, all []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(l, "FATAL") || strings.Contains(l, "ERROR") || strings.Contains(l, "Bungled") {
			bad = append(bad, strings.TrimSpace(l))
		}
		all = append(all, l)
	}
	if len(bad) > 0 {
		return termsafe.Printable(strings.Join(bad, "; "))
	}
	if len(all) > 3 {
		all = all[len(all)-3:]
	}
	if s := strings.Join(all, "; "); s != "" {
		return termsafe.Printable(s)
	}
	return "no message in " + filepath.Join(g.Dir, "cache.log")
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
	// A kill that fails because the gate is already gone is fine: Remove
	// below is what must succeed, and it reports its own failure.
	_ = c.ContainerKill(context.TODO(), g.Name, "KILL")
	return engine.Remove(context.TODO(), c, g.Name)
}
