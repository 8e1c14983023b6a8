package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aisb-dev/aisb/allowlist"
	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/live"
	"github.com/aisb-dev/aisb/registry"
)

// steer is what makes a running session visible (aisb ps) and steerable
// (aisb allow, deny, watch): its registry entry and, for a session gate,
// its live server.
type steer struct {
	dir       string // the registry
	entry     registry.Entry
	server    *live.Server
	audit     *os.File
	helperDir string // mounted into the gate; "" without a live server
}

// startSteer records the session and, when it gets its own gate, starts the
// live server before the gate, so the gate's helper finds its socket.
func startSteer(o Options, id, dir, owner string) (*steer, error) {
	netCfg := o.Config.Config.Network
	gated := netCfg.Mode == contract.ModeAllow && o.GateName == ""
	if netCfg.Ask && !gated {
		return nil, errors.New("ask mode (--ask, network.ask) needs the session's own gate: network mode allow without --gate")
	}
	s := &steer{dir: o.Paths.RunningDir(), entry: registry.Entry{
		ID: id, Project: o.ProjectDir, Mode: string(netCfg.Mode), Gate: o.GateName,
		Ask: netCfg.Ask, Started: time.Now().UTC(), Owner: owner, Allowlist: hostStrings(o.Config.Allowlist),
	}}
	if err := registry.Write(s.dir, s.entry); err != nil {
		return nil, err
	}
	if !gated {
		return s, nil
	}
	helper, err := live.FindHelper(o.GateHelper)
	if err == nil {
		s.helperDir = filepath.Join(dir, "ask")
		err = live.PrepareHelperDir(s.helperDir, helper)
	}
	if err == nil {
		err = os.MkdirAll(o.Paths.AuditDir(), 0o700)
	}
	if err == nil {
		s.audit, err = os.OpenFile(filepath.Join(o.Paths.AuditDir(), id+".jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	}
	if err == nil {
		s.entry.Control = registry.SocketPath(s.dir, id)
		s.server, err = live.Start(live.Options{
			Session: id, Start: o.Config.Allowlist, Ask: netCfg.Ask, AskTimeout: netCfg.AskWait(),
			HelperSocket: filepath.Join(s.helperDir, gate.HelperSocket), ControlSocket: s.entry.Control,
			Audit: s.audit,
			OnChange: func(list []string) {
				s.entry.Allowlist = list
				if err := registry.Write(s.dir, s.entry); err != nil {
					o.Logf("%v", err)
				}
			},
		})
	}
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("live session: %w", err)
	}
	return s, nil
}

// publish records the running session with its gate's port: from now on
// aisb ps lists it and aisb allow, deny and watch find its control socket.
func (s *steer) publish(port int) error {
	if s.server != nil {
		s.entry.Allowlist = s.server.Allowlist()
	}
	s.entry.GatePort = port
	return registry.Write(s.dir, s.entry)
}

// stop removes the session from the registry and stops the live server.
// The gate is gone by then (its stop runs first); the helper's copy is not
// kept with the session's files.
func (s *steer) stop() {
	registry.Remove(s.dir, s.entry.ID)
	if s.server != nil {
		s.server.Close()
	}
	if s.audit != nil {
		s.audit.Close()
	}
	if s.helperDir != "" {
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
