// Package contract is what aisb and its entrypoint agree on: the session policy and its JSON, the network modes, the exit statuses and the agent's identity.
package contract

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Exit statuses of the entrypoint when it refuses to run the command.
const (
	ExitEnforce = 77 // EX_NOPERM: the table or the privilege drop could not be enforced
	ExitPolicy  = 78 // EX_CONFIG: the session policy is missing, unreadable or invalid
)

// PolicyDir is the directory aisb mounts read-only in the sandbox: it holds
// the session policy and, once the gate is ready, GateReadyFile.
const PolicyDir = "/etc/aisb"

// PolicyPath is where aisb puts the session policy in the sandbox, read-only.
const PolicyPath = PolicyDir + "/" + PolicyFile

// PolicyFile is the session policy's name in PolicyDir.
const PolicyFile = "policy.json"

// GateReadyFile, in the policy's directory, is aisb's word that the
// session's gate is ready (both its ports listen and squid has found its TLS
// port up). A policy with AwaitGate makes the entrypoint wait for it, at most
// GateWait, before it execs the command, so that the sandbox can start (and
// its table be installed) while the gate still starts, and the command's
// first request still finds the gate ready.
const GateReadyFile = "gate-ready"

// GateWait is how long the entrypoint waits for GateReadyFile; aisb gives up
// on a gate far sooner (20 s) and removes the sandbox.
const GateWait = 60 * time.Second

// StepAwaitGate is the entrypoint's step (Status.Step) when it stopped
// waiting for GateReadyFile: no word in time, or a signal meanwhile.
const StepAwaitGate = "wait for the gate"

// AgentUID and AgentGID are who the command runs as inside the sandbox.
const (
	AgentUID = 1000
	AgentGID = 1000
)

// AgentHome is the agent's home in the sandbox ($HOME); a harness's state
// volume is mounted below it.
const AgentHome = "/home/agent"

// MinNetBits is the widest IPv4 network an allowlist entry or a policy may name.
const MinNetBits = 8

// Mode is the sandbox's network mode.
type Mode string

// The network modes, from narrowest to widest.
const (
	ModeNone   Mode = "none"    // no network at all
	ModeAllow  Mode = "allow"   // the gate, admitting allowlisted names only (default)
	ModeNoGate Mode = "no-gate" // allowlisted names pinned at start, no proxy
	ModeOpen   Mode = "open"    // unfiltered, only when asked
)

// Modes lists the network modes from narrowest to widest.
var Modes = []Mode{ModeNone, ModeAllow, ModeNoGate, ModeOpen}

// Width orders the modes from narrowest (0) to widest; an unknown mode is
// len(Modes).
func (m Mode) Width() int {
	for i, x := range Modes {
		if x == m {
			return i
		}
	}
	return len(Modes)
}

// Valid reports whether m is one of Modes.
func (m Mode) Valid() bool { return m.Width() < len(Modes) }

// PolicyVersion is the only session policy format the entrypoint reads.
const PolicyVersion = 1

// Endpoint is one TCP destination.
type Endpoint struct {
	Addr netip.Addr `json:"addr"`
	Port uint16     `json:"port"`
}

func (e Endpoint) String() string { return netip.AddrPortFrom(e.Addr, e.Port).String() }

// Policy is the session policy aisb writes for the entrypoint.
type Policy struct {
	Version int  `json:"version"`
	Mode    Mode `json:"mode"`
	// Gate is the gate's address and port as seen from the sandbox (allow mode).
	Gate *Endpoint `json:"gate,omitempty"`
	// HostPorts are host-loopback ports the user opened, on the mapped host address.
	HostPorts []Endpoint `json:"host_ports,omitempty"`
	// Pinned are the addresses allowed names resolved to at start (no-gate mode),
	// admitted on TCP 80 and 443; PinnedNets are the IPv4 networks listed, the same.
	Pinned     []netip.Addr   `json:"pinned,omitempty"`
	PinnedNets []netip.Prefix `json:"pinned_nets,omitempty"`
	// SessionCA is the gate's session CA (one PEM certificate) when the gate
	// sets credentials; the entrypoint appends it to CABundle before the drop.
	SessionCA string `json:"session_ca,omitempty"`
	// AwaitGate makes the entrypoint wait for GateReadyFile, after every
	// step but the exec (allow mode with a gate of the session's own).
	AwaitGate bool `json:"await_gate,omitempty"`
	// GateUID, in a Kubernetes pod (aisb kube), is the gate container's
	// uid: the pod's containers share one network namespace, and the table
	// lets the traffic of that uid alone leave it (the agent reaches the
	// gate on the pod's loopback). 0: not a pod, no such rule.
	GateUID uint32 `json:"gate_uid,omitempty"`
	// Transparent (allow mode) makes the entrypoint start the relay
	// (entrypoint/relay) before the drop: a resolver of its own for the
	// agent, and the agent's TCP to the names it resolved carried to the
	// gate by name; the table redirects both to it.
	Transparent bool `json:"transparent,omitempty"`
}

// PodDir is where a pod's init container writes the record of the table it
// installed and verified (an emptyDir, read-only in the agent container),
// and PodRecord that record's name in it.
const (
	PodDir    = "/run/aisb-pod"
	PodRecord = "table.nft"
	// PodCABundle, in PodDir, is the CA bundle the init container writes
	// when the gate sets credentials: the image's bundle and the session
	// CA. The agent's CA variables (CABundleEnv) point at it: the agent
	// container's own bundle is root's in its image.
	PodCABundle = "ca-certificates.crt"
)

// The relay of a transparent sandbox: who it runs as (neither root nor the
// agent, so the agent can neither signal, trace nor read it), where it
// listens (ports below 1024, which the agent cannot bind) and the range its
// resolver maps names into (198.18.0.0/15, benchmarking space: never a
// real destination).
const (
	RelayUID = 999
	RelayGID = 999
	// RelayProbeName is the name the entrypoint asks the relay's resolver
	// for before the exec: no answer from the mapped range, no command.
	RelayProbeName = "relay-probe.aisb.invalid"
	// ResolvConf is the sandbox's resolver configuration, which the
	// entrypoint points at RelayDNS.
	ResolvConf = "/etc/resolv.conf"
)

// RelayPorts are the ports of a mapped address the table sends to the
// relay: those the gate can admit (HTTPS, plain HTTP, SSH for the hosts on
// the SSH list). Any other port is refused by the table itself.
var RelayPorts = []uint16{443, 80, 22}

var (
	MappedRange = netip.MustParsePrefix("198.18.0.0/15")
	RelayTCP    = Endpoint{Addr: netip.MustParseAddr("127.0.0.1"), Port: 999}
	RelayDNS    = Endpoint{Addr: netip.MustParseAddr("127.0.0.53"), Port: 53}
)

// CABundle is the sandbox image's CA bundle, where the entrypoint appends
// the session CA; aisb points CABundleEnv at it.
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// CABundleEnv are the variables set to CABundle when a session has a CA:
// the tools that read no system store (Node, Python requests) or another
// one (some git and curl builds) then trust the gate for credential hosts.
var CABundleEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"}

// IsOneCertificate reports whether s is exactly one PEM CERTIFICATE block.
func IsOneCertificate(s string) bool {
	blk, rest := pem.Decode([]byte(s))
	return blk != nil && blk.Type == "CERTIFICATE" && len(blk.Headers) == 0 && len(bytes.TrimSpace(rest)) == 0
}

// ErrPolicy is wrapped by every policy validation error.
var ErrPolicy = errors.New("invalid session policy")

func policyErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrPolicy, fmt.Sprintf(format, args...))
}

// ParsePolicy decodes a session policy strictly (unknown fields refused) and validates it.
func ParsePolicy(b []byte) (Policy, error) {
	var p Policy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, policyErr("%v", err)
	}
	if dec.More() {
		return Policy{}, policyErr("trailing data after the policy object")
	}
	return p, p.Validate()
}

// Marshal validates the policy and encodes it as the entrypoint reads it.
func (p Policy) Marshal() ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(p)
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
		if p.SessionCA != "" && !IsOneCertificate(p.SessionCA) {
			return policyErr("session_ca: not one PEM certificate")
		}
	case ModeNoGate:
		if p.Gate != nil || p.SessionCA != "" {
			return policyErr("no-gate mode has no gate")
		}
		for _, a := range p.Pinned {
			if err := checkEndpoint("pinned address", Endpoint{Addr: a, Port: 443}); err != nil {
				return err
			}
		}
		for _, n := range p.PinnedNets {
			if !n.IsValid() || !n.Addr().Is4() || n.Bits() < MinNetBits || n.Masked() != n {
				return policyErr("pinned network %s: need a masked IPv4 network of /%d or narrower", n, MinNetBits)
			}
		}
	case ModeNone, ModeOpen:
		if p.Gate != nil || len(p.Pinned) > 0 || len(p.PinnedNets) > 0 || len(p.HostPorts) > 0 || p.SessionCA != "" {
			return policyErr("%s mode admits no destinations", p.Mode)
		}
	default:
		return policyErr("mode %q; want allow, none, no-gate or open", p.Mode)
	}
	if p.GateUID != 0 {
		switch {
		case p.Mode != ModeAllow:
			return policyErr("gate_uid: %s mode has no gate", p.Mode)
		case p.GateUID == AgentUID:
			return policyErr("gate_uid %d is the agent's uid; the gate needs a uid of its own", p.GateUID)
		case p.GateUID == 1<<32-1:
			return policyErr("gate_uid %d is not a uid", p.GateUID)
		case p.GateUID == RelayUID:
			return policyErr("gate_uid %d is the relay's uid; the gate needs a uid of its own", p.GateUID)
		case p.AwaitGate:
			return policyErr("await_gate: a pod's gate is its own container, not awaited")
		case p.Transparent:
			return policyErr("transparent: a pod (gate_uid) has no relay yet; the agent reaches its gate through the proxy variables")
		}
	}
	if p.Transparent && p.Mode != ModeAllow {
		return policyErr("transparent: %s mode has no gate to carry connections to (allow mode only)", p.Mode)
	}
	if p.AwaitGate && p.Mode != ModeAllow {
		return policyErr("await_gate: %s mode has no gate to wait for", p.Mode)
	}
	for _, e := range p.HostPorts {
		if err := checkEndpoint("host port", e); err != nil {
			return err
		}
	}
	return nil
}
