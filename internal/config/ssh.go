package config

import (
	"github.com/aisb-dev/aisb/internal/allowlist"
)

// network.ssh_hosts and sandbox.ssh_agent: the hosts SSH may reach through
// the gate on port 22, and whether the user's ssh-agent is forwarded. What
// a project file may do with either is in their entries in fields.

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
