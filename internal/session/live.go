package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/live"
)

// steer is what makes a running session visible (aisb ps) and steerable
// (aisb allow, deny, watch): its registry entry and, for a session gate,
// its live server and the audit file the server and the gate's follower
// share.
type steer struct {
	dir       string // the registry
	mu        sync.Mutex
	entry     live.Entry // guarded by mu: the live server changes its allowlist
	published bool       // the entry is in the registry (guarded by mu)
	server    *live.Server
	audit     *audit.Audit // nil without a session gate
	helperDir string       // mounted into the gate; "" without a live server
	logf      func(string, ...any)
}

// startSteer prepares the session's registry entry and, when it gets its
// own gate, opens its audit and starts the live server before the gate, so
// the gate's helper finds its socket. On an engine that is not local the
// gate's helper cannot reach this host's sockets: there is no helper
// directory, and the gate's questions come through the API to the
// server's Ask (gate.Remote.Ask). Nothing is listed before publish.
func startSteer(o Options, id, dir, owner, helper string, remote bool) (*steer, error) {
	netCfg := o.Config.Config.Network
	gated := ownGate(o)
	s := &steer{dir: o.Paths.RunningDir(), logf: o.Logf, entry: live.Entry{
		ID: id, Project: o.ProjectDir, Mode: string(netCfg.Mode), Gate: o.GateName,
		Ask: netCfg.Ask, Started: time.Now().UTC(), Owner: owner, Allowlist: hostStrings(o.Config.Allowlist),
	}}
	// Checked now, before anything starts: the control socket goes there.
	if err := live.PrepareRegistry(s.dir); err != nil {
		return nil, err
	}
	if !gated {
		return s, nil
	}
	sessionMax, totalMax := o.Config.Config.Logs.Bytes()
	aud, err := audit.OpenAudit(o.Paths.AuditDir(), id, audit.AuditLimits{Session: sessionMax, Total: totalMax})
	if err != nil {
		s.stop(false)
		return nil, err
	}
	s.audit = aud
	helperSocket := ""
	if !remote {
		s.helperDir = helperDir(dir)
		err = live.PrepareHelperDir(s.helperDir, helper)
		helperSocket = filepath.Join(s.helperDir, squidconf.HelperSocket)
	}
	if err == nil {
		s.entry.Control = live.SocketPath(s.dir, id)
		s.server, err = live.Start(live.Options{
			Session: id, Start: o.Config.Allowlist, Ask: netCfg.Ask, AskTimeout: netCfg.AskWait(),
			HelperSocket: helperSocket, ControlSocket: s.entry.Control,
			Record: aud.Record,
			OnChange: func(list []string) {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.entry.Allowlist = list
				if !s.published {
					return // publish writes it
				}
				if err := live.Register(s.dir, s.entry); err != nil {
					o.Logf("%v", err)
				}
			},
		})
	}
	if err != nil {
		s.stop(false)
		return nil, fmt.Errorf("live session: %w", err)
	}
	return s, nil
}

// ErrAskNeedsGate is ask mode in a session without a gate of its own.
var ErrAskNeedsGate = errors.New("ask mode (--ask, network.ask) needs the session's own gate")

// ownGate reports whether the session gets a gate of its own, which its
// live server steers.
func ownGate(o Options) bool {
	return o.Config.Config.Network.Mode == contract.ModeAllow && o.GateName == ""
}

// checkAsk refuses ask mode where nothing could hold a request: before
// anything starts.
func checkAsk(o Options) error {
	n := o.Config.Config.Network
	switch {
	case !n.Ask || ownGate(o):
		return nil
	case o.GateName != "":
		return fmt.Errorf("%w: the long-lived gate %s has a fixed list; drop --gate, or --ask", ErrAskNeedsGate, o.GateName)
	default:
		return fmt.Errorf("%w: network mode %s has none; use --net allow, or drop --ask (and network.ask)", ErrAskNeedsGate, n.Mode)
	}
}

// publish records the running session, with its gate's port and control
// socket, in one write: from now on aisb ps lists it, and aisb allow, deny
// and watch find a session ready to answer them (never one still starting).
func (s *steer) publish(port int) error {
	s.mu.Lock() // the entry's allowlist is current: every change went through OnChange
	defer s.mu.Unlock()
	s.entry.GatePort = port
	if err := live.Register(s.dir, s.entry); err != nil {
		return err
	}
	s.published = true
	return nil
}

// quiet stops the live server once the sandbox is gone: whatever it
// records is in the audit before the session's end is handed over.
func (s *steer) quiet() {
	if s.server != nil {
		s.server.Close()
	}
}

// helperDir is where a session's gate finds its helper (gate.Options.HelperDir):
// in the session's directory, removed once the gate is gone.
func helperDir(sessionDir string) string { return filepath.Join(sessionDir, "ask") }

// stop removes the session from the registry, stops the live server and
// closes the audit. The gate's follower is gone by then (its stop runs
// first); the helper's copy is not kept with the session's files. When the
// gate was handed to the watchdog (handedOff) it still runs, and squid would
// die on a helper it can no longer start (its helper may not have started
// yet in a short session): the watchdog removes the copy after the gate.
func (s *steer) stop(handedOff bool) {
	s.mu.Lock()
	s.published = false // a last change must not list it again
	s.mu.Unlock()
	live.Unregister(s.dir, s.entry.ID)
	if s.server != nil {
		s.server.Close()
	}
	if s.audit != nil {
		if err := s.audit.Close(); err != nil {
			s.logf("the audit of session %s is incomplete: %v", s.entry.ID, err)
		}
	}
	if s.helperDir != "" && !handedOff {
		os.RemoveAll(s.helperDir)
	}
}

func hostStrings(list []allowlist.Host) []string {
	out := make([]string, len(list))
	for i, h := range list {
		out[i] = h.String()
	}
	return out
}
