package session

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/sandbox"
)

// network is what a session's mode set up: the session policy on disk, the
// pins for no-gate mode, and, in allow mode, the session's gate and the
// watch that says when it dies under a running agent.
type network struct {
	policyDir string // the session policy's directory, the sandbox's /etc/aisb
	hostAdd   []string
	gatePort  int // on the host's loopback, in allow mode
	// awaited says that the entrypoint waits for the word that the gate is
	// ready (sandbox.TellGateReady) before it execs the command.
	awaited bool
	// handedOff says, after close, that the session's watchdog finishes
	// the gate: it removes the gate's secrets, not aisb.
	handedOff bool
	// early is closed when finishEarly's finish has ended; nil without one.
	early chan struct{}

	gate gater // nil outside allow mode
	logf func(string, ...any)
	// onLost, when set, is what the session does when its gate dies
	// instead of only saying so (a remote gate's, remote.go).
	onLost func(error)
	alive  struct {
		ctx     context.Context
		stop    context.CancelFunc
		done    chan struct{} // closed when the watch has ended; nil before ready
		mu      sync.Mutex
		lostErr error // the gate dying mid-session (gate.ErrLost), guarded by mu
	}
}

// openNetwork writes the session policy for the mode: in allow mode once
// the gate is created (the policy names its port; env gets the proxy
// variables; the gate is still starting until ready returns), in no-gate
// mode with the names pinned at start.
func (r *run) openNetwork(ctx context.Context) error {
	o, cfg := r.o, r.o.Config.Config
	mode := cfg.Network.Mode
	mapped := netip.MustParseAddr(sandbox.MappedHost(r.helper))
	n := &network{logf: o.Logf}
	if r.remote {
		n.onLost = r.gateLost
	}
	p := contract.Policy{Version: contract.PolicyVersion, Mode: mode}
	switch mode {
	case contract.ModeAllow:
		// The gate parses untrusted traffic: it gets a directory of its own,
		// never the one holding the sandbox's policy.
		sg, err := o.seams.openGateFunc()(r, ctx)
		if err != nil {
			return err
		}
		n.gate = sg
		n.alive.ctx, n.alive.stop = context.WithCancel(ctx)
		port := sg.port()
		n.gatePort = port
		p.Gate = &contract.Endpoint{Addr: mapped, Port: uint16(port)}
		// The sandbox starts while its own gate still starts; the
		// entrypoint execs the command only once ready has told it.
		p.AwaitGate = o.GateName == ""
		// Programs that ignore the proxy variables reach the gate too,
		// through the relay the entrypoint starts (entrypoint/relay).
		p.Transparent = true
		n.awaited = p.AwaitGate
		if sg.caCert() != nil {
			// The sandbox trusts the gate for the credential hosts.
			p.SessionCA = string(sg.caCert())
			caEnv(r.env)
		}
		// The proxy URL carries the token that proves the sandbox to its
		// gate: any other local process is refused there.
		for k, v := range proxyEnv(sg.proxyURL(mapped.String())) {
			r.env[k] = v
		}
	case contract.ModeNoGate:
		pins, err := pin(ctx, resolver(cfg.Network.Resolvers()), o.Config.Allowlist, o.Logf)
		if err != nil {
			return err
		}
		n.hostAdd, p.Pinned, p.PinnedNets = pins.hostAdd, pins.addrs, pins.nets
	case contract.ModeOpen:
		o.Logf("WARNING: network mode open: the sandbox can reach anything this host can, unfiltered and unaudited")
	}
	if mode == contract.ModeAllow || mode == contract.ModeNoGate {
		for _, port := range cfg.Network.HostPorts {
			p.HostPorts = append(p.HostPorts, contract.Endpoint{Addr: mapped, Port: uint16(port)})
		}
	}
	// The sandbox's /etc/aisb, where the entrypoint also looks for the
	// gate's word (sandbox.TellGateReady).
	n.policyDir = filepath.Join(r.dir, "policy")
	// From here the teardown ends the gate, in its order, should the
	// policy fail to be written.
	r.net = n
	if err := sandbox.WritePolicy(n.policyDir, p); err != nil {
		return fmt.Errorf("session policy: %w", err)
	}
	if o.Unenforced {
		o.Logf("WARNING: --allow-unenforced: if the network table cannot be installed or verified, the sandbox runs without it")
	}
	r.trace("network set up")
	return nil
}

// ready returns once the network carries the sandbox's first request: in
// allow mode, once the gate is ready (both its ports listen and squid has
// found its TLS port up). From then on the user hears at once when the gate
// dies under a running agent.
func (n *network) ready() error {
	if n.gate == nil {
		return nil
	}
	if err := n.gate.ready(); err != nil {
		return err
	}
	if n.alive.done != nil {
		return nil
	}
	n.alive.done = make(chan struct{})
	go func() {
		defer close(n.alive.done)
		n.gate.watchAlive(n.alive.ctx, func(err error) {
			n.alive.mu.Lock()
			n.alive.lostErr = err
			n.alive.mu.Unlock()
			if n.onLost != nil {
				n.onLost(err)
				return
			}
			n.logf("WARNING: %v: the sandbox can no longer reach the network (its requests fail, nothing gets out); this session will end in error", err)
		})
	}()
	return nil
}

// lost is the gate dying mid-session (gate.ErrLost), or nil.
func (n *network) lost() error {
	n.alive.mu.Lock()
	defer n.alive.mu.Unlock()
	return n.alive.lostErr
}

// finish stops the watch and finishes the gate's audit, or hands the gate
// to the watchdog (see sessionGate.finish); after finishEarly it waits for
// that.
func (n *network) finish(trace func(string)) {
	if n.early != nil {
		<-n.early
		return
	}
	n.finishNow(trace)
}

// finishEarly starts finish in the background once the sandbox has exited
// on an engine that is not local: nothing can send through the gate any
// more (the sandbox's processes and its network helper are gone), so the
// gate's end (squid killed, the audit's stream read to its end) overlaps
// what the session still does with the exited sandbox (its status and the
// project's copy, each an archive copy by the service). A local session's
// gate goes to the watchdog, off the user's path, instead.
func (n *network) finishEarly(trace func(string)) {
	if n == nil || n.gate == nil || n.early != nil {
		return
	}
	n.early = make(chan struct{})
	go func() {
		defer close(n.early)
		n.finishNow(trace)
	}()
}

func (n *network) finishNow(trace func(string)) {
	if n.gate == nil {
		return
	}
	n.alive.stop()
	if n.alive.done != nil {
		<-n.alive.done
	}
	handedOff, err := n.gate.finish(trace)
	if err != nil {
		n.logf("%v", err)
	}
	n.handedOff = handedOff
}

// removeGate removes the gate's container, unless the watchdog has it.
func (n *network) removeGate(trace func(string)) {
	if n.gate == nil || n.handedOff {
		return
	}
	if err := n.gate.remove(trace); err != nil {
		n.logf("%v", err)
	}
}

// gateDir is the gate's directory within the session directory dir.
func gateDir(dir string) string { return filepath.Join(dir, "gate") }

// sessionGate is the gate of one session: its own, or a long-lived one
// (which the session neither starts nor ends).
type sessionGate struct {
	r         *run
	g         *gate.Gate
	longLived bool
	opening   chan error // Open's result, read once (opened)
	once      sync.Once
	openErr   error
	follower  *audit.Follower
	// ctx is the session's, for the hand-over; watchCtx ends the host watch.
	ctx       context.Context
	watchCtx  context.Context
	stopWatch context.CancelFunc
	removed   bool          // the container is gone (or the watchdog's to remove)
	watched   chan struct{} // closed when the host watch has ended; nil before ready
}

// openGate creates the session's gate and starts it in the background (or
// finds the long-lived one), and follows its audit into the steering's
// audit file. A session gate asks the live server through the helper
// directory (see startSteer).
func (r *run) openGate(ctx context.Context) (*sessionGate, error) {
	o, cfg := r.o, r.o.Config.Config
	if o.GateName != "" {
		where := ""
		if r.remote {
			// On the engine's host, found through its API
			// (gate/longremote.go).
			where = r.c.Address()
		}
		g, err := gate.Find(r.c, o.GateName, o.Paths.GateDir(o.GateName), where)
		if err != nil {
			return nil, err
		}
		return &sessionGate{r: r, g: g, longLived: true}, nil
	}
	gopts := gate.Options{Session: r.id, Dir: gateDir(r.dir), Image: r.imgs.gate, Allowlist: o.Config.Allowlist, SSHHosts: o.Config.SSHHosts,
		DNS: cfg.Network.Resolvers(), Owner: r.owner, HelperDir: r.st.helperDir, Credentials: r.creds, UpstreamCAs: cfg.Network.UpstreamCA,
		Finisher: r.wd.Owner()}
	if r.remote {
		// The gate cannot reach this host's helper socket: its questions
		// come through the API to the live server (gate's bridge.go).
		gopts.HelperDir = ""
		gopts.Remote = &gate.Remote{Probe: r.gateHelper, Logf: o.Logf}
		if r.st.server != nil {
			gopts.Remote.Ask = r.st.server.Ask
		}
	}
	g, err := gate.Create(r.c, gopts)
	if err != nil {
		return nil, err
	}
	r.trace("gate created")
	sg := &sessionGate{r: r, g: g, opening: make(chan error, 1)}
	// Started while the sandbox is created (session.Run).
	go func() { sg.opening <- g.Open(r.c) }()
	sg.follower = gate.StartFollow(ctx, g, r.st.audit, 0, o.Logf)
	sg.ctx = ctx
	sg.watchCtx, sg.stopWatch = context.WithCancel(ctx)
	return sg, nil
}

func (sg *sessionGate) port() int                   { return sg.g.Port }
func (sg *sessionGate) caCert() []byte              { return sg.g.CACert() }
func (sg *sessionGate) proxyURL(host string) string { return sg.g.ProxyURL(host) }

// watchAlive calls lost when the gate dies (gate.WatchAlive).
func (sg *sessionGate) watchAlive(ctx context.Context, lost func(error)) {
	gate.WatchAlive(ctx, sg.g, 250*time.Millisecond, lost)
}

// opened waits for the gate's start (later calls say the same).
func (sg *sessionGate) opened() error {
	sg.once.Do(func() { sg.openErr = <-sg.opening })
	return sg.openErr
}

// ready waits until the gate is ready (later calls say the same), then
// has it follow the host's addresses and on-link prefixes, which can
// change during a long session.
func (sg *sessionGate) ready() error {
	if sg.longLived {
		return nil
	}
	if err := sg.opened(); err != nil || sg.watched != nil {
		return err
	}
	if sg.g.CheckedAtHold() {
		sg.r.trace("gate ready (both ports, TLS port checked at aisb's hold)")
	} else {
		sg.r.trace("gate ready (both ports, TLS port checked)")
	}
	sg.watched = make(chan struct{})
	if sg.g.Remote() {
		// The engine host's addresses were read once, by the probe.
		close(sg.watched)
		return nil
	}
	go func() {
		defer close(sg.watched)
		gate.WatchHost(sg.watchCtx, sg.g, gate.WatchEvery, func() error { return gate.Reconfigure(sg.r.c, sg.g) }, sg.r.o.Logf)
	}()
	return nil
}

// finish ends the gate's part of the session and reports whether the
// session's watchdog took it over, its secrets and its removal included.
// With a watchdog, it converts what the gate logged so far and hands the
// rest (the last requests' lines, the gate's removal) to the watchdog,
// which finishes after aisb has returned (Finish). Without one, squid is
// quiesced and killed, so that it logs nothing more, and the audit is
// completed here; the gate's secrets go next, then its container (remove):
// run.teardown keeps that order.
func (sg *sessionGate) finish(trace func(string)) (handedOff bool, err error) {
	if sg.longLived {
		return false, nil
	}
	r := sg.r
	sg.stopWatch()
	if sg.opened() != nil {
		// Open removed the gate; what it may have logged is kept.
		sg.removed = true
		return false, sg.follower.Stop()
	}
	if sg.watched != nil {
		<-sg.watched
	}
	// The sandbox is gone: nothing asks the live server any more, and
	// what it records is in the audit before the watchdog goes on.
	r.st.quiet()
	if r.wd != nil && !r.remote {
		handedOff, err = handOff(sg.ctx, r.c, r.o, r.id, sg.g, sg.follower, r.wd, trace)
		// Not handed over: handOff finished and removed the gate itself.
		sg.removed = true
		return handedOff, err
	}
	sg.g.Quiesce(time.Second)
	trace("gate quiet")
	if !sg.g.KillSquid(time.Second) && sg.g.Remote() {
		// Its log stream did not end in time: what it still held is
		// missing from the audit, which the follower cannot know.
		r.o.Logf("the gate's access log through the API did not end within 1s of its kill: the audit of session %s may miss its last lines", r.id)
	}
	trace("squid stopped")
	if ferr := sg.follower.Stop(); ferr != nil {
		return false, fmt.Errorf("the audit of session %s is incomplete: %w", r.id, ferr)
	}
	trace("gate's audit complete")
	return false, nil
}

// remove removes the gate's container, once its audit is complete and its
// secrets are gone; a long-lived gate is not the session's to remove.
func (sg *sessionGate) remove(trace func(string)) error {
	if sg.longLived || sg.removed {
		return nil
	}
	sg.removed = true
	err := sg.g.Kill(sg.r.c)
	trace("gate removed")
	return err
}
