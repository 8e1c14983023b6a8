package audit

import "strings"

// LogVersion is the first field of every access-log line the gate writes;
// the audit parser refuses lines of any other version.
const LogVersion = "aisb2"

// Rules name the http_access line that decided a request; the access log
// records them and the audit explains them.
const (
	RuleClient      = "client"       // the client is not on loopback
	RuleManager     = "manager"      // the cache manager
	RuleConnectPort = "connect_port" // CONNECT to anything but 443 (and 22, see RuleSSHNotListed)
	RuleScheme      = "scheme"       // a plain request for anything but http://
	RulePort        = "port"         // plain HTTP to anything but 80 and 443
	RuleIPLiteral   = "ip_literal"   // an address instead of a name, not listed
	RuleNotListed   = "not_listed"   // a name not on the allowlist
	RuleInternal    = "internal"     // an allowed name resolving to an internal address
	RuleAllowed     = "allowed"      // admitted
	// RuleNotSandbox is a request that did not prove it comes from the
	// session's own sandbox (its gate token), or on the TLS port one that is
	// neither the front's hand-over nor decrypted from a bumped tunnel:
	// another local user, or a process outside the sandbox.
	RuleNotSandbox = "not_sandbox"
)

// Rules of the TLS layer: the gate peeks at every tunnel's ClientHello and
// splices it only when the name in it (SNI) is admitted for the tunnel's own
// target; credential hosts are bumped instead so the gate can set their key.
const (
	RuleSNIMismatch = "sni_mismatch" // the ClientHello names a host not admitted for the CONNECT target
	RuleNoSNI       = "no_sni"       // a tunnel to a name whose ClientHello names no host
	RuleNotTLS      = "not_tls"      // the tunnel did not start with a TLS ClientHello
	RuleTerminated  = "terminated"   // squid closed the tunnel at the TLS step without a rule of ours
	RuleBumped      = "bumped"       // a tunnel to a credential host, decrypted by the gate
	RuleCredential  = "credential"   // an HTTPS request to a credential host; the gate set its header
	RuleWebsocket   = "websocket"    // an upgrade to a websocket inside a bumped tunnel
	// Inside a bumped tunnel only the credential host's own requests pass.
	RuleBumpedMethod = "bumped_method" // CONNECT, TRACE or TRACK inside a bumped tunnel
	RuleBumpedHost   = "bumped_host"   // a request for another host than the bumped tunnel's own
	// RuleUpstream is a request to port 443 that squid answered itself with
	// 502/503 before any rule: inside a bumped tunnel, the credential host
	// could not be reached or its certificate did not verify (measured: logged
	// without a rule and without the TLS step). The key was not sent.
	RuleUpstream = "upstream_failed"
)

// SSH through the gate: a CONNECT to port 22 is admitted only for the names
// on the session's SSH list (network.ssh_hosts, --allow-ssh), which is kept
// apart from the HTTPS allowlist; port 443 is unchanged by it.

// SSHPort is the one port SSH tunnels may go to.
const SSHPort = 22

// RuleSSHNotListed tags a CONNECT to port 22 for a name not on the SSH list.
const RuleSSHNotListed = "ssh_not_listed"

// SelfAddr is the source address of the gate's front's connections to its
// TLS port (tcp_outgoing_address, see squidconf), a client the gate admits
// like loopback; the audit reads a request-less line from it as squid
// checking that its TLS port is up.
const SelfAddr = "127.0.0.3"

// IsSelfCheck reports whether an access-log line is squid checking its own
// TLS port: a connection from SelfAddr that carried no request. Squid writes
// such lines whatever the access_log ACLs say (they are checked only for
// transactions with a request).
func IsSelfCheck(e Event) bool {
	return e.Client == SelfAddr && e.Method == "-" && e.Bytes == 0 && strings.Trim(e.Host, "-") == ""
}
