package config

import (
	"fmt"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/harness"
)

// Overrides are what the user said on the command line; they take precedence
// over every file and may widen, because the user typed them.
type Overrides struct {
	Mode      string   // --net
	Allow     []string // --allow, added to the allowlist
	AllowSSH  []string // --allow-ssh, added to the SSH list
	SSHAgent  bool     // --ssh-agent
	HostPorts []int    // --host-port, added
	Env       []string // --env NAME or NAME=VALUE
	Harness   string   // --harness
	BaseImage string   // --base-image (or AISB_BASE_IMAGE)
	Pids      int      // --pids
	Memory    string   // --memory
	CPUs      float64  // --cpus
	Ask       bool     // --ask: turns network.ask on
	State     string   // --state, or "none" for --fresh
	// Credentials are --credential NAME: a key that stays on the host, set
	// by the gate where a harness preset or the user's config says it goes.
	Credentials []string
}

// Apply lays the overrides over the resolved configuration. Problems name
// the flag and the fix, like file problems name the field.
func (r *Resolved) Apply(o Overrides) error {
	var ps Problems
	for _, fd := range fields {
		if fd.apply == nil {
			continue
		}
		fd.apply(r, o, func(format string, args ...any) {
			ps = append(ps, Problem{File: "command line", Field: fd.flag, Msg: fmt.Sprintf(format, args...)})
		})
	}
	if len(ps) > 0 {
		return ps
	}
	if ps := r.joinCredentials(); len(ps) > 0 {
		return ps
	}
	return nil
}

// JoinHarness adds the chosen harness's API hosts to the allowlist (a
// harness cannot work without them), except in mode none, where nothing is
// reached. Call it for a session's configuration, after Apply; a long-lived
// gate takes the user's list alone.
func (r *Resolved) JoinHarness() error {
	h, err := harness.Lookup(r.Config.Sandbox.Harness)
	if err != nil {
		return err
	}
	if r.Config.Network.Mode == contract.ModeNone {
		return nil
	}
	hosts, err := h.AllowedHosts()
	if err != nil {
		return err
	}
	for _, x := range hosts {
		if !allowlist.Covered(r.Allowlist, x) {
			r.Allowlist = allowlist.Add(r.Allowlist, x)
			r.HarnessHosts = append(r.HarnessHosts, x)
		}
	}
	return nil
}
