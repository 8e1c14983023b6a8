// Package ruleset builds, applies and verifies the nftables table that locks a sandbox's network namespace.
package ruleset

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/contract"
)

// Table and chain names; the entrypoint's read-back checks exactly these.
const (
	TableName = "aisb"
	ChainName = "output"
	// NATChainName is the transparent sandbox's second chain: it sends the
	// agent's TCP to a mapped address and its DNS to the relay.
	NATChainName = "to_relay"
)

// ErrOpen is returned by Build for open mode, which has no table by design.
var ErrOpen = errors.New("open mode installs no table")

// Kind is what one rule accepts.
type Kind int

const (
	Loopback    Kind = iota // every packet out of lo
	Established             // replies and related packets of accepted flows
	TCPTo                   // new TCP connections to one address and port
	TCPToNet                // new TCP connections to one network and port
	SocketUID               // every packet of sockets owned by one uid (a pod's gate)
	DNATed                  // packets of a flow the to_relay chain sent to the relay
	RejectTCP               // every other TCP packet: refused at once with a reset
	RejectAll               // every other packet: refused at once, ICMP admin-prohibited

	// The to_relay chain's kinds (transparent sandboxes only).
	RedirectNet // the agent's new TCP to Net, port DPort: to the relay's To
	RedirectDNS // the agent's DNS (Proto, port 53, any address): to the resolver's To
)

// Rule is one accept rule of the output chain.
type Rule struct {
	Kind Kind
	To   contract.Endpoint // for TCPTo; for TCPToNet, the port
	Net  netip.Prefix      // for TCPToNet and RedirectNet
	UID  uint32            // for SocketUID
	// Proto is the transport (unix.IPPROTO_UDP or IPPROTO_TCP) for RedirectDNS.
	Proto uint8
	// DPort is the destination port RedirectNet matches.
	DPort uint16
}

// Ruleset is the whole table: one output base chain, policy drop, its
// accept rules in order and the two reject rules that end it, and for a
// transparent sandbox the to_relay chain (nat, output hook) before it.
type Ruleset struct {
	Rules    []Rule
	Redirect []Rule
}

// Build derives the ruleset from a valid policy. Nothing is accepted but
// loopback, established flows and the policy's TCP destinations: no DNS, no
// UDP, no ICMP, no IPv6; everything else is rejected at once (a TCP reset,
// or ICMP admin-prohibited), never left to time out. A transparent policy
// adds the to_relay chain: the agent's (uid AgentUID) TCP to the relay's
// mapped range goes to the relay, its DNS to any address to the relay's
// resolver, and the filter chain accepts what was so redirected.
func Build(p contract.Policy) (*Ruleset, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Mode == contract.ModeOpen {
		return nil, ErrOpen
	}
	rs := &Ruleset{Rules: []Rule{{Kind: Loopback}, {Kind: Established}}}
	if p.GateUID != 0 {
		// A pod: the gate is a container beside the agent's, in the same
		// network namespace; its uid alone leaves (Policy.GateUID).
		rs.Rules = append(rs.Rules, Rule{Kind: SocketUID, UID: p.GateUID})
	}
	add := func(e contract.Endpoint) {
		for _, r := range rs.Rules {
			if r.Kind == TCPTo && r.To == e {
				return
			}
		}
		rs.Rules = append(rs.Rules, Rule{Kind: TCPTo, To: e})
	}
	if p.Gate != nil {
		add(*p.Gate)
	}
	for _, a := range p.Pinned {
		add(contract.Endpoint{Addr: a, Port: 80})
		add(contract.Endpoint{Addr: a, Port: 443})
	}
	for _, n := range p.PinnedNets {
		for _, port := range []uint16{80, 443} {
			rs.Rules = append(rs.Rules, Rule{Kind: TCPToNet, Net: n, To: contract.Endpoint{Port: port}})
		}
	}
	for _, e := range p.HostPorts {
		add(e)
	}
	if p.Transparent {
		rs.Rules = append(rs.Rules[:2], append([]Rule{{Kind: DNATed}}, rs.Rules[2:]...)...)
		// Only the ports the gate can admit reach the relay; any other
		// port of a mapped address meets the reject rules (a reset before
		// the connection is even made).
		for _, port := range contract.RelayPorts {
			rs.Redirect = append(rs.Redirect, Rule{Kind: RedirectNet, Net: contract.MappedRange, DPort: port, To: contract.RelayTCP})
		}
		rs.Redirect = append(rs.Redirect, []Rule{
			{Kind: RedirectDNS, Proto: unix.IPPROTO_UDP, To: contract.RelayDNS},
			{Kind: RedirectDNS, Proto: unix.IPPROTO_TCP, To: contract.RelayDNS},
		}...)
	}
	rs.Rules = append(rs.Rules, Rule{Kind: RejectTCP}, Rule{Kind: RejectAll})
	return rs, nil
}

// Text renders the ruleset as `nft list table inet aisb` prints it once the
// kernel holds it, so the two can be compared verbatim.
func (rs *Ruleset) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", TableName)
	fmt.Fprintf(&b, "\tchain %s {\n", ChainName)
	b.WriteString("\t\ttype filter hook output priority filter; policy drop;\n")
	for _, r := range rs.Rules {
		b.WriteString("\t\t" + r.text() + "\n")
	}
	b.WriteString("\t}\n")
	if len(rs.Redirect) > 0 {
		fmt.Fprintf(&b, "\n\tchain %s {\n", NATChainName)
		b.WriteString("\t\ttype nat hook output priority -100; policy accept;\n")
		for _, r := range rs.Redirect {
			b.WriteString("\t\t" + r.text() + "\n")
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

func (r Rule) text() string {
	switch r.Kind {
	case Loopback:
		return `oif "lo" accept`
	case Established:
		return "ct state established,related accept"
	case TCPToNet:
		return fmt.Sprintf("ip daddr %s tcp dport %d accept", r.Net, r.To.Port)
	case SocketUID:
		return fmt.Sprintf("meta skuid %d accept", r.UID)
	case DNATed:
		return "ct status dnat accept"
	case RejectTCP:
		return "meta l4proto tcp reject with tcp reset"
	case RejectAll:
		return "reject with icmpx admin-prohibited"
	case RedirectNet:
		return fmt.Sprintf("meta skuid %d ip daddr %s tcp dport %d dnat ip to %s", contract.AgentUID, r.Net, r.DPort, r.To)
	case RedirectDNS:
		proto := "udp"
		if r.Proto == unix.IPPROTO_TCP {
			proto = "tcp"
		}
		return fmt.Sprintf("meta skuid %d %s dport 53 dnat ip to %s", contract.AgentUID, proto, r.To)
	default:
		return fmt.Sprintf("ip daddr %s tcp dport %d accept", r.To.Addr, r.To.Port)
	}
}
