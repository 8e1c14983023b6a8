package squidconf

import (
	"fmt"

	"github.com/aisb-dev/aisb/gate/audit"
)

// The gate listens on two ports of the host's loopback. The sandbox talks to
// the front port only (its table admits nothing else): every refusal is
// answered there with a 403 the client can read. A CONNECT to port 443 that
// the front admits is handed, by squid to itself (a parent peer), to the TLS
// port, which peeks at the tunnel's ClientHello and splices, bumps or
// terminates it.
//
// Why two ports: squid answers every CONNECT on an ssl-bump port with 200,
// also one that http_access refuses, and delivers the refusal inside TLS
// with a certificate of its own making (measured on 6.13: the client sees a
// failed handshake, never the 403 and its hint). So no refusal may happen on
// a port with ssl-bump, and none the sandbox talks to has it.

// Names squid knows the two ports and the peer by.
const (
	frontPortName = "gate_front"
	tlsPortName   = "gate_tls"
	tlsPeerName   = "gate_tls_peer"
)

// renderPorts writes the two http_port lines. generate says whether the TLS
// port makes certificates (for credential hosts only).
func renderPorts(line func(string, ...any), c Config, generate bool) {
	gen := "off"
	if generate {
		gen = "on"
	}
	line("# The sandbox talks to the front port only: every refusal is answered")
	line("# there, with a 403. Tunnels to 443 it admits are handed to the TLS port,")
	line("# which checks their TLS handshake (see the TLS part). A port with ssl-bump")
	line("# would answer every CONNECT with 200, also one refused; the sandbox never")
	line("# reaches it. Certificates are generated, from the session CA, for")
	line("# credential hosts only. The TLS port is shared (worker-queues sets")
	line("# SO_REUSEPORT) with aisb, which holds it until squid has checked it.")
	line("http_port 127.0.0.1:%d name=%s", c.Port, frontPortName)
	line("http_port 127.0.0.1:%d name=%s worker-queues ssl-bump tls-cert=%s/%s tls-key=%s/%s generate-host-certificates=%s dynamic_cert_mem_cache_size=1MB",
		c.TLSPort, tlsPortName, c.Dir, CACertFile, c.Dir, CAKeyFile, gen)
}

// renderHandover writes the parent peer that hands the front's admitted
// tunnels to 443 to the TLS port, and the access log, which must come after
// every ACL it names. Only the TLS port's line of a handed-over tunnel is
// kept: it says what the TLS step did.
func renderHandover(line func(string, ...any), c Config) {
	line("")
	line("# The front hands every tunnel to 443 it admitted to the TLS port, never")
	line("# connecting there itself (never_direct). The TLS port connects directly.")
	line("# squid checks its peer at start, before its own ports listen: a refused")
	line("# first check would leave the TLS port \"dead\" until a request fails, so")
	line("# connections are retried (connect_retries).")
	line("acl gate_tls_target port 443")
	line("acl gate_to_tls_peer peername %s", tlsPeerName)
	line("cache_peer 127.0.0.1 parent %d 0 no-query no-digest no-netdb-exchange name=%s %s", c.TLSPort, tlsPeerName, peerLogin(c.Tokens))
	line("cache_peer_access %s allow gate_at_front gate_connect gate_tls_target", tlsPeerName)
	line("cache_peer_access %s deny all", tlsPeerName)
	line("never_direct allow gate_at_front gate_connect gate_tls_target")
	line("tcp_outgoing_address %s gate_to_tls_peer", audit.SelfAddr)
	line("connect_retries 3")
	line("")
	line("# One line per decision: the front's line of a tunnel it handed over")
	line("# (admitted, 200) is left out; the TLS port's line of it is the decision.")
	line("acl gate_noted_allowed note rule %s", audit.RuleAllowed)
	line("acl gate_status_ok http_status 200")
	line("acl gate_handed_over all-of gate_at_front gate_connect gate_tls_target gate_noted_allowed gate_status_ok")
	line("access_log %s gate_audit !gate_handed_over", c.accessLog())
}

// checkPorts says what is wrong with the two ports.
func checkPorts(c Config) error {
	for _, p := range []int{c.Port, c.TLSPort} {
		if p < 1 || p > 65535 {
			return fmt.Errorf("render gate config: port %d", p)
		}
	}
	if c.Port == c.TLSPort {
		return fmt.Errorf("render gate config: the front and TLS ports are both %d", c.Port)
	}
	return nil
}
