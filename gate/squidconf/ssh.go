package squidconf

import (
	"fmt"
	"strings"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/allowlist"
)

// SSH through the gate: see audit.SSHPort.

// sshNames checks that every SSH host came from the validator and is a name:
// an SSH entry is never an address or a network.
func sshNames(hosts []allowlist.Host) ([]string, error) {
	var names []string
	for _, h := range hosts {
		if again, err := allowlist.ParseHost(h.String()); err != nil || again != h {
			return nil, fmt.Errorf("render gate config: ssh host %q did not come from the validator", h.String())
		}
		if h.IsAddr() || h.IsNet() {
			return nil, fmt.Errorf("render gate config: ssh host %q is an address; SSH goes to listed names only", h.String())
		}
		names = append(names, h.String())
	}
	return names, nil
}

// sshACLs are the ACL lines for SSH; none of them resolves anything.
func sshACLs(names []string) []string {
	acls := []string{fmt.Sprintf("acl gate_ssh_port port %d", audit.SSHPort)}
	if len(names) > 0 {
		acls = append(acls, "acl gate_ssh_names dstdomain -n "+strings.Join(names, " "))
	}
	return acls
}

// sshAccess is the http_access line that refuses a CONNECT to port 22 for a
// name not on the SSH list. It comes before the "not listed" line, which
// then lets listed SSH tunnels through to the internal-address check.
func sshAccess(names []string) string {
	if len(names) == 0 {
		return "http_access deny gate_connect gate_ssh_port gate_rule_" + audit.RuleSSHNotListed
	}
	return "http_access deny gate_connect gate_ssh_port !gate_ssh_names gate_rule_" + audit.RuleSSHNotListed
}
