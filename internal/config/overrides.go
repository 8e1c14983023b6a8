package config

import (
	"fmt"
	"slices"
	"strings"

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
	bad := func(flag, format string, args ...any) {
		ps = append(ps, Problem{File: "command line", Field: flag, Msg: fmt.Sprintf(format, args...)})
	}
	c := &r.Config
	if o.Mode != "" {
		if m := contract.Mode(o.Mode); !m.Valid() {
			bad("--net", "%q is not a mode; write one of %s", o.Mode, modeList())
		} else {
			c.Network.Mode = m
		}
	}
	for _, a := range o.Allow {
		h, err := allowlist.ParseHost(a)
		if err != nil {
			bad("--allow", "%v", err)
			continue
		}
		// A wider --allow replaces the entries it covers.
		r.Allowlist = allowlist.Add(r.Allowlist, h)
	}
	for _, a := range o.AllowSSH {
		if err := r.addSSHHost(a); err != nil {
			bad("--allow-ssh", "%v", err)
		}
	}
	if o.SSHAgent {
		c.Sandbox.SSHAgent = true
	}
	for _, p := range o.HostPorts {
		if p < 1 || p > 65535 {
			bad("--host-port", "%d is not a TCP port; write a number from 1 to 65535", p)
		} else if !slices.Contains(c.Network.HostPorts, p) {
			c.Network.HostPorts = append(c.Network.HostPorts, p)
		}
	}
	for _, e := range o.Env {
		name, value, hasValue := strings.Cut(e, "=")
		if msg := CheckEnvName(name); msg != "" {
			bad("--env", "%s", msg)
			continue
		}
		if hasValue {
			if c.Env.Set == nil {
				c.Env.Set = map[string]string{}
			}
			c.Env.Set[name] = value
		} else if !slices.Contains(c.Env.Pass, name) {
			c.Env.Pass = append(c.Env.Pass, name)
		}
	}
	if o.Harness != "" {
		c.Sandbox.Harness = o.Harness
		f := &File{Name: "command line", Config: Config{Sandbox: Sandbox{Harness: o.Harness}}, defined: map[string]bool{"sandbox.harness": true}}
		for _, p := range checkHarness(f) {
			p.Field = "--harness"
			ps = append(ps, p)
		}
	}
	if o.Ask {
		c.Network.Ask = true
	}
	if o.BaseImage != "" {
		c.Sandbox.BaseImage = o.BaseImage
	}
	if o.State != "" {
		if s, err := ParseStateScope(o.State); err != nil {
			bad("--state", "%v", err)
		} else {
			c.Sandbox.State = s
		}
	}
	if o.Pids < 0 {
		bad("--pids", "%d is negative", o.Pids)
	} else if o.Pids > 0 {
		c.Limits.Pids = o.Pids
	}
	if o.Memory != "" {
		if _, err := ParseMemory(o.Memory); err != nil {
			bad("--memory", "%v", err)
		} else {
			c.Limits.Memory = o.Memory
		}
	}
	if o.CPUs < 0 {
		bad("--cpus", "%g is negative", o.CPUs)
	} else if o.CPUs > 0 && o.CPUs < MinCPUs {
		bad("--cpus", "%s", cpusTooSmall(o.CPUs))
	} else if o.CPUs > 0 {
		c.Limits.CPUs = o.CPUs
	}
	for _, n := range o.Credentials {
		if msg, ok := r.credentialFlag(n); !ok {
			bad("--credential", "%s", msg)
		}
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
