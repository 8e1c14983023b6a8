// Package ruleset builds, applies and verifies the nftables table that locks a sandbox's network namespace.
package ruleset

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/aisb-dev/aisb/contract"
)

// Table and chain names; the entrypoint's read-back checks exactly these.
const (
	TableName = "aisb"
	ChainName = "output"
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
)

// Rule is one accept rule of the output chain.
type Rule struct {
	Kind Kind
	To   contract.Endpoint // for TCPTo; for TCPToNet, the port
	Net  netip.Prefix      // for TCPToNet
	UID  uint32            // for SocketUID
}

// Ruleset is the whole table: one output base chain, policy drop, and the
// accept rules in order.
type Ruleset struct {
	Rules []Rule
}

// Build derives the ruleset from a valid policy. Nothing is accepted but
// loopback, established flows and the policy's TCP destinations: no DNS, no
// UDP, no ICMP, no IPv6.
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
	b.WriteString("\t}\n}\n")
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
	default:
		return fmt.Sprintf("ip daddr %s tcp dport %d accept", r.To.Addr, r.To.Port)
	}
}
