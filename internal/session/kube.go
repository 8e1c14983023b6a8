package session

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/harness"
)

// ErrNotInPod is wrapped when a session asks for what the pod form does
// not render (docs/kubernetes.md says why).
var ErrNotInPod = errors.New("not in the Kubernetes pod form")

// Pod is what a session would run, as the parts of a Kubernetes pod (aisb
// kube): the same configuration, flags and narrowing as aisb run, planned
// by the same code, with the gate beside the agent in the pod.
type Pod struct {
	Harness harness.Preset
	Command []string
	// Env is the agent's whole environment: what aisb run would give it
	// (placeholders in the credentials' variables), the proxy variables for
	// the gate on the pod's loopback and, with credentials, the CA
	// variables at the init container's bundle.
	Env    map[string]string
	Policy contract.Policy // a pod's: the gate on 127.0.0.1, its uid
	Gate   *gate.PodGate
}

// PlanPod plans o as a pod. What a pod cannot carry is refused by name,
// never dropped: SSH, the ssh-agent, ask mode and live steering, host
// ports, a long-lived gate, review mode and modes other than allow.
func PlanPod(o Options) (*Pod, error) {
	cfg := o.Config.Config
	n := cfg.Network
	var not []string
	switch {
	case n.Mode != contract.ModeAllow:
		not = append(not, fmt.Sprintf("network mode %s (a pod has its gate: mode allow)", n.Mode))
	case len(o.Config.SSHHosts) > 0:
		not = append(not, "SSH hosts (network.ssh_hosts, --allow-ssh)")
	case cfg.Sandbox.SSHAgent:
		not = append(not, "the ssh-agent (sandbox.ssh_agent, --ssh-agent)")
	case n.Ask:
		not = append(not, "ask mode (network.ask, --ask): nobody can answer from the cluster")
	case len(n.HostPorts) > 0:
		not = append(not, "host ports (network.host_ports, --host-port)")
	case o.GateName != "":
		not = append(not, "a long-lived gate (--gate)")
	case o.Review:
		not = append(not, "review mode (--review)")
	}
	if len(not) > 0 {
		return nil, fmt.Errorf("%w: %s; drop it", ErrNotInPod, not[0])
	}
	r, err := plan(o)
	if err != nil {
		return nil, err
	}
	g, err := gate.Pod(gate.PodOptions{Allowlist: o.Config.Allowlist, DNS: n.Resolvers(), Credentials: r.creds, UpstreamCAs: n.UpstreamCA})
	if err != nil {
		return nil, err
	}
	addr := gate.PodGateAddr()
	p := &Pod{Harness: r.h, Command: r.command, Env: r.env, Gate: g,
		Policy: contract.Policy{Version: contract.PolicyVersion, Mode: contract.ModeAllow,
			Gate: &contract.Endpoint{Addr: addr.Addr(), Port: addr.Port()}, GateUID: gate.PodUID}}
	for k, v := range proxyEnv(g.ProxyURL) {
		p.Env[k] = v
	}
	if g.CACert != nil {
		p.Policy.SessionCA = string(g.CACert)
		for _, k := range contract.CABundleEnv {
			p.Env[k] = filepath.Join(contract.PodDir, contract.PodCABundle)
		}
	}
	return p, nil
}
