package session

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/engine"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/image"
	"github.com/aisb-dev/aisb/sandbox"
)

// network is what a session's mode set up: the session policy on disk, the
// pins for no-gate mode, and how to take the gate down.
type network struct {
	policyFile string
	hostAdd    []string
	gatePort   int // on the host's loopback, in allow mode
	close      func(trace func(string))
	// lost is the gate dying mid-session (gate.ErrLost), or nil.
	lost func() error
}

// openNetwork writes the session policy for the mode: in allow mode after the
// gate listens (the policy names its port; env gets the proxy variables), in
// no-gate mode with the names pinned at start.
func openNetwork(ctx context.Context, c *engine.Conn, o Options, id, dir, owner, helper string, st *steer, env map[string]string, creds []gate.Credential) (*network, error) {
	cfg := o.Config.Config
	mode := cfg.Network.Mode
	mapped := netip.MustParseAddr(sandbox.MappedHost(helper))
	n := &network{close: func(func(string)) {}, lost: func() error { return nil }}
	p := contract.Policy{Version: contract.PolicyVersion, Mode: mode}
	switch mode {
	case contract.ModeAllow:
		// The gate parses untrusted traffic: it gets a directory of its own,
		// never the one holding the sandbox's policy.
		g, stop, err := openGate(ctx, c, o, id, gateDir(dir), owner, st, creds)
		if err != nil {
			return nil, err
		}
		port := g.Port
		// The user hears at once when the gate dies under a running agent.
		var mu sync.Mutex
		var lostErr error
		actx, stopAlive := context.WithCancel(ctx)
		alive := make(chan struct{})
		go func() {
			gate.WatchAlive(actx, g, 250*time.Millisecond, func(err error) {
				mu.Lock()
				lostErr = err
				mu.Unlock()
				o.Logf("WARNING: %v: the sandbox can no longer reach the network (its requests fail, nothing gets out); this session will end in error", err)
			})
			close(alive)
		}()
		n.lost = func() error {
			mu.Lock()
			defer mu.Unlock()
			return lostErr
		}
		n.close = func(trace func(string)) {
			stopAlive()
			<-alive
			if err := stop(); err != nil {
				o.Logf("%v", err)
			}
			trace("gate stopped")
		}
		n.gatePort = port
		p.Gate = &contract.Endpoint{Addr: mapped, Port: uint16(port)}
		if g.CACert != nil {
			// The sandbox trusts the gate for the credential hosts.
			p.SessionCA = string(g.CACert)
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
	b, err := p.Marshal()
	if err == nil {
		n.policyFile = filepath.Join(dir, "policy.json")
		err = os.WriteFile(n.policyFile, b, 0o644)
	}
	if err != nil {
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

// openGate starts the session's gate (or finds the long-lived one) and
// follows its audit into st's audit file; stop removes it. A session gate
// asks st's live server through the helper directory (see startSteer). It
// is not started concurrently with the sandbox's creation: measured here,
// Podman 5.4 then sometimes fails the sandbox's attach ("doesn't map UID
// 0"), for some 30 ms of gain.
func openGate(ctx context.Context, c *engine.Conn, o Options, id, dir, owner string, st *steer, creds []gate.Credential) (g *gate.Gate, stop func() error, err error) {
	cfg := o.Config.Config
	if o.GateName != "" {
		g, err := gate.Find(c, o.GateName, o.Paths.GateDir(o.GateName))
		if err != nil {
			return nil, nil, err
		}
		return g, func() error { return nil }, nil
	}
	gateImg, _, err := image.Ensure(c, gate.ImageSpec(cfg.Sandbox.BaseImage), image.Build{LockDir: o.Paths.LockDir(), Output: o.builds(), Logf: o.Logf})
	if err != nil {
		return nil, nil, err
	}
	g, err = gate.Start(c, gate.Options{Session: id, Dir: dir, Image: gateImg, Allowlist: o.Config.Allowlist, SSHHosts: o.Config.SSHHosts, DNS: cfg.Network.Resolvers(), Owner: owner, HelperDir: st.helperDir,
		Credentials: creds, UpstreamCAs: cfg.Network.UpstreamCA})
	if err != nil {
		return nil, nil, err
	}
	stopFollow := gate.FollowAudit(ctx, g, st.audit, o.Logf)
	// The host's addresses and on-link prefixes can change during a long
	// session: the gate follows them.
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		gate.WatchHost(wctx, g, gate.WatchEvery, func() error { return gate.Reconfigure(c, g) }, o.Logf)
		close(watched)
	}()
	return g, func() error {
		stopWatch()
		<-watched
		err := g.Stop(c)
		if ferr := stopFollow(); ferr != nil {
			err = errors.Join(err, fmt.Errorf("the audit of session %s is incomplete: %w", id, ferr))
		}
		return err
	}, nil
}
