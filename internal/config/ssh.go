package config

import (
	"fmt"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

// network.ssh_hosts and sandbox.ssh_agent: the hosts SSH may reach through
// the gate on port 22, and whether the user's ssh-agent is forwarded.

// checkSSHHosts parses network.ssh_hosts once, into File.SSH.
func checkSSHHosts(f *File) []Problem {
	hosts, errs := allowlist.ParseSSHList(f.Config.Network.SSHHosts)
	f.SSH = hosts
	return entryProblems(f, "network.ssh_hosts", errs)
}

// addSSHHost adds one --allow-ssh entry; a wider entry replaces those it covers.
func (r *Resolved) addSSHHost(entry string) error {
	hosts, errs := allowlist.ParseSSHList([]string{entry})
	if len(errs) > 0 {
		return errs[0]
	}
	r.SSHHosts = allowlist.Add(r.SSHHosts, hosts[0])
	return nil
}

// narrowSSHHosts keeps of an untrusted project's ssh_hosts only what the
// user's own configuration already lists.
func (r *Resolved) narrowSSHHosts(f *File, ignore func(field, why string)) {
	if !f.Defines("network.ssh_hosts") {
		return
	}
	kept, dropped := allowlist.Narrow(r.SSHHosts, f.SSH)
	for _, h := range dropped {
		ignore(fmt.Sprintf("network.ssh_hosts %q", h.String()), "a project file cannot add SSH hosts your own configuration does not list")
	}
	r.SSHHosts = kept
}

// keepAgentOff undoes a project file turning sandbox.ssh_agent on, trusted
// or not: a forwarded agent lets the sandbox sign as you for every host the
// gate admits, so only you can ask for it (your own file or --ssh-agent).
// Turning it off is a narrowing and stands. before is the setting the
// project file found.
func (r *Resolved) keepAgentOff(f *File, before bool) {
	if !f.Defines("sandbox.ssh_agent") {
		return
	}
	if !f.Config.Sandbox.SSHAgent {
		r.Config.Sandbox.SSHAgent = false
		return
	}
	r.Config.Sandbox.SSHAgent = before
	if !before {
		r.Notices = append(r.Notices, fmt.Sprintf("%s: sandbox.ssh_agent ignored: a project file can never forward your ssh-agent; use --ssh-agent or sandbox.ssh_agent in your own configuration", f.Name))
	}
}
