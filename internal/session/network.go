package session

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/reaper"
	"github.com/aisb-dev/aisb/internal/sandbox"
)

// network is what a session's mode set up: the session policy on disk, the
// pins for no-gate mode, and how to take the gate down.
type network struct {
	policyDir string // the session policy's directory, the sandbox's /etc/aisb
	hostAdd   []string
	gatePort  int // on the host's loopback, in allow mode
	// ready returns once the network carries the sandbox's first request:
	// in allow mode, once the gate is ready (both its ports listen and squid
	// has found its TLS port up).
	ready func() error
	// awaited says that the entrypoint waits for the word that the gate is
	// ready (sandbox.TellGateReady) before it execs the command.
	awaited bool
	close   func(trace func(string))
	// handedOff says, after close, that the session's watchdog finishes
	// the gate: it removes the gate's secrets, not aisb.
	handedOff bool
	// lost is the gate dying mid-session (gate.ErrLost), or nil.
	lost func() error
}

// openNetwork writes the session policy for the mode: in allow mode once
// the gate is created (the policy names its port; env gets the proxy
// variables; the gate is still starting until ready returns), in no-gate
// mode with the names pinned at start.
func openNetwork(ctx context.Context, c *engine.Conn, o Options, id, dir, owner, helper, gateImage string, st *steer, wd *reaper.Watchdog, env map[string]string, creds []squidconf.Credential, trace func(string)) (*network, error) {
	cfg := o.Config.Config
	mode := cfg.Network.Mode
	mapped := netip.MustParseAddr(sandbox.MappedHost(helper))
	n := &network{ready: func() error { return nil }, close: func(func(string)) {}, lost: func() error { return nil }}
	p := contract.Policy{Version: contract.PolicyVersion, Mode: mode}
	switch mode {
	case contract.ModeAllow:
		// The gate parses untrusted traffic: it gets a directory of its own,
		// never the one holding the sandbox's policy.
		sg, err := openGate(ctx, c, o, id, gateDir(dir), owner, gateImage, st, wd, creds, trace)
		if err != nil {
			return nil, err
		}
		g := sg.g
		// The user hears at once when the gate dies under a running agent.
		var mu sync.Mutex
		var lostErr error
		actx, stopAlive := context.WithCancel(ctx)
		alive := make(chan struct{})
		watching := false
		n.ready = func() error {
			if err := sg.ready(); err != nil {
				return err
			}
			watching = true
			go func() {
				gate.WatchAlive(actx, g, 250*time.Millisecond, func(err error) {
					mu.Lock()
					lostErr = err
					mu.Unlock()
					o.Logf("WARNING: %v: the sandbox can no longer reach the network (its requests fail, nothing gets out); this session will end in error", err)
				})
				close(alive)
			}()
			return nil
		}
		n.lost = func() error {
			mu.Lock()
			defer mu.Unlock()
			return lostErr
		}
		n.close = func(trace func(string)) {
			stopAlive()
			if watching {
				<-alive
			}
			handedOff, err := sg.close(trace)
			if err != nil {
				o.Logf("%v", err)
			}
			n.handedOff = handedOff
		}
		port := g.Port
		n.gatePort = port
		p.Gate = &contract.Endpoint{Addr: mapped, Port: uint16(port)}
		// The sandbox starts while its own gate still starts; the
		// entrypoint execs the command only once ready has told it.
		p.AwaitGate = o.GateName == ""
		n.awaited = p.AwaitGate
		if g.CACert() != nil {
			// The sandbox trusts the gate for the credential hosts.
			p.SessionCA = string(g.CACert())
			caEnv(env)
		}
		for k, v := range proxyEnv(fmt.Sprintf("http://%s:%d", mapped, port)) {
			env[k] = v
		}
	case contract.ModeNoGate:
		pins, err := pin(ctx, resolver(cfg.Network.Resolvers()), o.Config.Allowlist, o.Logf)
		if err != nil {
			return nil, err
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
	n.policyDir = filepath.Join(dir, "policy")
	if err := sandbox.WritePolicy(n.policyDir, p); err != nil {
		n.close(func(string) {})
		return nil, fmt.Errorf("session policy: %w", err)
	}
	if o.Unenforced {
		o.Logf("WARNING: --allow-unenforced: if the network table cannot be installed or verified, the sandbox runs without it")
	}
	return n, nil
}

// gateDir is the gate's directory within the session directory dir.
func gateDir(dir string) string { return filepath.Join(dir, "gate") }

// sessionGate is the gate of one session: its own, or a long-lived one.
type sessionGate struct {
	g     *gate.Gate
	ready func() error // waits until it is ready (later calls say the same)
	// close ends it and reports whether the session's watchdog took it
	// over, its secrets included.
	close func(trace func(string)) (handedOff bool, err error)
}

// openGate creates the session's gate and starts it in the background (or
// finds the long-lived one), and follows its audit into st's audit file. A
// session gate asks st's live server through the helper directory (see
// startSteer). ready waits until it is ready; close ends it: with a
// watchdog, it converts what the gate logged so far and hands the rest (the
// last requests' lines, the gate's removal) to the watchdog, which finishes
// after aisb has returned (Finish).
func openGate(ctx context.Context, c *engine.Conn, o Options, id, dir, owner, gateImage string, st *steer, wd *reaper.Watchdog, creds []squidconf.Credential, trace func(string)) (*sessionGate, error) {
	cfg := o.Config.Config
	if o.GateName != "" {
		g, err := gate.Find(c, o.GateName, o.Paths.GateDir(o.GateName))
		if err != nil {
			return nil, err
		}
		return &sessionGate{g: g, ready: func() error { return nil }, close: func(func(string)) (bool, error) { return false, nil }}, nil
	}
	gopts := gate.Options{Session: id, Dir: dir, Image: gateImage, Allowlist: o.Config.Allowlist, SSHHosts: o.Config.SSHHosts, DNS: cfg.Network.Resolvers(), Owner: owner, HelperDir: st.helperDir,
		Credentials: creds, UpstreamCAs: cfg.Network.UpstreamCA}
	if wd != nil {
		gopts.Finisher = wd.Owner()
	}
	g, err := gate.Create(c, gopts)
	if err != nil {
		return nil, err
	}
	trace("gate created")
	// Started while the sandbox is created (session.Run).
	opening := make(chan error, 1)
	go func() { opening <- g.Open(c) }()
	follower := gate.StartFollow(ctx, g, st.audit, 0, o.Logf)
	var once sync.Once
	var openErr error
	opened := func() error {
		once.Do(func() { openErr = <-opening })
		return openErr
	}
	wctx, stopWatch := context.WithCancel(ctx)
	var watched chan struct{}
	sg := &sessionGate{g: g}
	sg.ready = func() error {
		if err := opened(); err != nil || watched != nil {
			return err
		}
		if g.CheckedAtHold() {
			trace("gate ready (both ports, TLS port checked at aisb's hold)")
		} else {
			trace("gate ready (both ports, TLS port checked)")
		}
		// The host's addresses and on-link prefixes can change during a
		// long session: the gate follows them.
		watched = make(chan struct{})
		go func() {
			gate.WatchHost(wctx, g, gate.WatchEvery, func() error { return gate.Reconfigure(c, g) }, o.Logf)
			close(watched)
		}()
		return nil
	}
	sg.close = func(trace func(string)) (bool, error) {
		stopWatch()
		if opened() != nil {
			// Open removed the gate; what it may have logged is kept.
			return false, follower.Stop()
		}
		if watched != nil {
			<-watched
		}
		// The sandbox is gone: nothing asks the live server any more, and
		// what it records is in the audit before the watchdog goes on.
		st.quiet()
		if wd != nil {
			return handOff(ctx, c, o, id, g, follower, wd, trace)
		}
		g.Quiesce(time.Second)
		err := g.Kill(c)
		trace("gate removed")
		if ferr := follower.Stop(); ferr != nil {
			err = errors.Join(err, fmt.Errorf("the audit of session %s is incomplete: %w", id, ferr))
		}
		return false, err
	}
	return sg, nil
}
