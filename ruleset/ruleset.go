// Package ruleset turns a sandbox's network policy into the nftables table that
// locks its network namespace: nft text and netlink objects from one description.
package ruleset

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// PolicyVersion is the only session policy format the entrypoint reads.
const PolicyVersion = 1

// Table and chain names; the entrypoint's read-back checks exactly these.
const (
	TableName = "aisb"
	ChainName = "output"
)

// Network modes, as in aisb's configuration.
const (
	ModeAllow  = "allow"
	ModeNone   = "none"
	ModeNoGate = "no-gate"
	ModeOpen   = "open"
)

// Endpoint is one TCP destination.
type Endpoint struct {
	Addr netip.Addr `json:"addr"`
	Port uint16     `json:"port"`
}

func (e Endpoint) String() string { return netip.AddrPortFrom(e.Addr, e.Port).String() }

// Policy is the session policy aisb writes for the entrypoint.
type Policy struct {
	Version int    `json:"version"`
	Mode    string `json:"mode"`
	// Gate is the gate's address and port as seen from the sandbox (allow mode).
	Gate *Endpoint `json:"gate,omitempty"`
	// HostPorts are host-loopback ports the user opened, on the mapped host address.
	HostPorts []Endpoint `json:"host_ports,omitempty"`
	// Pinned are the addresses allowed names resolved to at start (no-gate mode),
	// admitted on TCP 80 and 443; PinnedNets are the IPv4 networks listed, the same.
	Pinned     []netip.Addr   `json:"pinned,omitempty"`
	PinnedNets []netip.Prefix `json:"pinned_nets,omitempty"`
}

// ErrPolicy is wrapped by every policy validation error.
var ErrPolicy = errors.New("invalid session policy")

// ErrOpen is returned by Build for open mode, which has no table by design.
var ErrOpen = errors.New("open mode installs no table")

func policyErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrPolicy, fmt.Sprintf(format, args...))
}

// ParsePolicy decodes a session policy strictly (unknown fields refused) and validates it.
func ParsePolicy(b []byte) (Policy, error) {
	var p Policy
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, policyErr("%v", err)
	}
	if dec.More() {
		return Policy{}, policyErr("trailing data after the policy object")
	}
	return p, p.Validate()
}

// Validate checks the policy as a list of named rules, in order.
func (p Policy) Validate() error {
	if p.Version != PolicyVersion {
		return policyErr("version %d; this entrypoint reads version %d", p.Version, PolicyVersion)
	}
	checkEndpoint := func(what string, e Endpoint) error {
		if !e.Addr.Is4() || e.Addr.IsUnspecified() || e.Addr.IsMulticast() {
			return policyErr("%s %s: need a unicast IPv4 address (the sandbox has no IPv6)", what, e.Addr)
		}
		if e.Port == 0 {
			return policyErr("%s: port 0", what)
		}
		return nil
	}
	switch p.Mode {
	case ModeAllow:
		if p.Gate == nil {
			return policyErr("allow mode needs the gate's address")
		}
		if err := checkEndpoint("gate", *p.Gate); err != nil {
			return err
		}
		if len(p.Pinned) > 0 || len(p.PinnedNets) > 0 {
			return policyErr("pinned addresses belong to no-gate mode")
		}
	case ModeNoGate:
		if p.Gate != nil {
			return policyErr("no-gate mode has no gate")
		}
		for _, a := range p.Pinned {
			if err := checkEndpoint("pinned address", Endpoint{Addr: a, Port: 443}); err != nil {
				return err
			}
		}
		for _, n := range p.PinnedNets {
			if !n.IsValid() || !n.Addr().Is4() || n.Bits() < 8 || n.Masked() != n {
				return policyErr("pinned network %s: need a masked IPv4 network of /8 or narrower", n)
			}
		}
	case ModeNone, ModeOpen:
		if p.Gate != nil || len(p.Pinned) > 0 || len(p.PinnedNets) > 0 || len(p.HostPorts) > 0 {
			return policyErr("%s mode admits no destinations", p.Mode)
		}
	default:
		return policyErr("mode %q; want allow, none, no-gate or open", p.Mode)
	}
	for _, e := range p.HostPorts {
		if err := checkEndpoint("host port", e); err != nil {
			return err
		}
	}
	return nil
}

// Kind is what one rule accepts.
type Kind int

const (
	Loopback    Kind = iota // every packet out of lo
	Established             // replies and related packets of accepted flows
	TCPTo                   // new TCP connections to one address and port
	TCPToNet                // new TCP connections to one network and port
)

// Rule is one accept rule of the output chain.
type Rule struct {
	Kind Kind
	To   Endpoint     // for TCPTo; for TCPToNet, the port
	Net  netip.Prefix // for TCPToNet
}

// Ruleset is the whole table: one output base chain, policy drop, and the
// accept rules in order.
type Ruleset struct {
	Rules []Rule
}

// Build derives the ruleset from a valid policy. Nothing is accepted but
// loopback, established flows and the policy's TCP destinations: no DNS, no
// UDP, no ICMP, no IPv6.
func Build(p Policy) (*Ruleset, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Mode == ModeOpen {
		return nil, ErrOpen
	}
	rs := &Ruleset{Rules: []Rule{{Kind: Loopback}, {Kind: Established}}}
	add := func(e Endpoint) {
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
		add(Endpoint{Addr: a, Port: 80})
		add(Endpoint{Addr: a, Port: 443})
	}
	for _, n := range p.PinnedNets {
		for _, port := range []uint16{80, 443} {
			rs.Rules = append(rs.Rules, Rule{Kind: TCPToNet, Net: n, To: Endpoint{Port: port}})
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
	default:
		return fmt.Sprintf("ip daddr %s tcp dport %d accept", r.To.Addr, r.To.Port)
	}
}
