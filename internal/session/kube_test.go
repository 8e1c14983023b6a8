package session

import (
	"errors"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/state"
)

func podOptions(t *testing.T, edit func(*config.Resolved, *Options)) Options {
	t.Helper()
	cfg := config.Default()
	cfg.Sandbox.Harness = "shell"
	list, err := allowlist.Parse([]string{"allowed.test"})
	if err != nil {
		t.Fatal(err)
	}
	r := &config.Resolved{Config: cfg, Allowlist: list}
	o := Options{Config: r, Paths: state.Paths{State: t.TempDir(), Runtime: t.TempDir(), Config: t.TempDir()},
		ProjectDir: t.TempDir(), Command: []string{"true"}, Logf: func(string, ...any) {}}
	if edit != nil {
		edit(r, &o)
	}
	return o
}

// TestPlanPod: the pod's policy names the gate on the pod's loopback and
// its uid; the agent's environment has the proxy with its token and the
// placeholder; the key reaches the gate's squid.conf alone.
func TestPlanPod(t *testing.T) {
	t.Setenv("POD_TEST_KEY", "real-key-value")
	p, err := PlanPod(podOptions(t, func(r *config.Resolved, _ *Options) {
		r.Config.Credentials = []config.Credential{{Host: "api.allowed.test", Header: "x-api-key", Env: "POD_TEST_KEY"}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if p.Policy.GateUID != gate.PodUID || p.Policy.Gate.String() != "127.0.0.1:3128" || p.Policy.SessionCA == "" {
		t.Errorf("policy %+v", p.Policy)
	}
	if err := p.Policy.Validate(); err != nil {
		t.Error(err)
	}
	if p.Env["POD_TEST_KEY"] != Placeholder || !strings.HasPrefix(p.Env["HTTPS_PROXY"], "http://aisb:") || p.Env["SSL_CERT_FILE"] != contract.PodDir+"/"+contract.PodCABundle {
		t.Errorf("env %v", p.Env)
	}
	for k, v := range p.Env {
		if strings.Contains(v, "real-key-value") {
			t.Errorf("the key is in the agent's %s", k)
		}
	}
	if !strings.Contains(string(p.Gate.Files["squid.conf"]), "real-key-value") {
		t.Error("control: the key is not in the gate's squid.conf")
	}
}

// TestPlanPodRefuses: what a pod does not carry is refused by name.
func TestPlanPodRefuses(t *testing.T) {
	ssh, _ := allowlist.Parse([]string{"git.example"})
	for name, edit := range map[string]func(*config.Resolved, *Options){
		"mode":       func(r *config.Resolved, _ *Options) { r.Config.Network.Mode = contract.ModeNone },
		"ssh":        func(r *config.Resolved, _ *Options) { r.SSHHosts = ssh },
		"ssh-agent":  func(r *config.Resolved, _ *Options) { r.Config.Sandbox.SSHAgent = true },
		"ask":        func(r *config.Resolved, _ *Options) { r.Config.Network.Ask = true },
		"host ports": func(r *config.Resolved, _ *Options) { r.Config.Network.HostPorts = []int{8000} },
		"gate":       func(_ *config.Resolved, o *Options) { o.GateName = "shared" },
		"review":     func(_ *config.Resolved, o *Options) { o.Review = true },
	} {
		if _, err := PlanPod(podOptions(t, edit)); !errors.Is(err, ErrNotInPod) {
			t.Errorf("%s: %v, want ErrNotInPod", name, err)
		}
	}
}
