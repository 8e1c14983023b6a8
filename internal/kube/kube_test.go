package kube

import (
	"bytes"
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/aisb-dev/aisb/contract"
)

var update = flag.Bool("update", false, "rewrite the golden file")

func options() Options {
	return Options{
		Name:         "aisb-demo",
		SandboxImage: "registry.example/aisb-sandbox:1",
		GateImage:    "registry.example/aisb-gate:1",
		Command:      []string{"pi"},
		Env:          map[string]string{"HTTPS_PROXY": "http://aisb:0123@127.0.0.1:3128", "ANTHROPIC_API_KEY": "placeholder"},
		Policy: contract.Policy{Version: 1, Mode: contract.ModeAllow, GateUID: 13,
			Gate: &contract.Endpoint{Addr: netip.MustParseAddr("127.0.0.1"), Port: 3128}},
		GateFiles:   map[string][]byte{"squid.conf": []byte("http_port 127.0.0.1:3128\n")},
		GateCommand: []string{"/bin/sh", "-c", "exec squid -N"},
		TTY:         true,
		Memory:      "4Gi",
	}
}

// TestGolden: the Pod form of one session, as rendered, is testdata/pod.yaml.
func TestGolden(t *testing.T) {
	m, err := Render(options())
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.YAML(false)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "pod.yaml")
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(path, got, 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("rendered\n%s\nwant (%s)\n%s", got, path, want)
	}
}

// TestStrictDecode: every kind rendered decodes back strictly into its
// k8s.io/api type (no unknown field) and equals what was rendered; a
// field no type has is refused (the control that strictness is on).
func TestStrictDecode(t *testing.T) {
	m, err := Render(options())
	if err != nil {
		t.Fatal(err)
	}
	for _, template := range []bool{false, true} {
		b, err := m.YAML(template)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Decode(b)
		if err != nil {
			t.Fatalf("template=%v: %v", template, err)
		}
		want := []any{m.ConfigMap, m.Secret, m.Pod}
		if template {
			want[2] = m.Template()
		}
		if len(objs) != 3 {
			t.Fatalf("template=%v: %d objects", template, len(objs))
		}
		for i := range objs {
			if !reflect.DeepEqual(objs[i], want[i]) {
				t.Errorf("template=%v: object %d decodes to\n%#v\nwant\n%#v", template, i, objs[i], want[i])
			}
		}
	}
	b, _ := m.YAML(false)
	for name, bad := range map[string]string{
		"unknown pod field":       strings.Replace(string(b), "restartPolicy: Never", "restartPolicy: Never\n  hostNetwrok: true", 1),
		"unknown container field": strings.Replace(string(b), "    name: agent\n", "    name: agent\n    privilegd: true\n", 1),
		"unknown kind":            strings.Replace(string(b), "kind: Pod", "kind: Deployment", 1),
	} {
		if bad == string(b) {
			t.Fatalf("%s: the replacement did not apply", name)
		}
		if _, err := Decode([]byte(bad)); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: Decode = %v, want ErrManifest", name, err)
		}
	}
}

// TestPodShape: what the design relies on, read from the typed Pod.
func TestPodShape(t *testing.T) {
	m, err := Render(options())
	if err != nil {
		t.Fatal(err)
	}
	s := m.Pod.Spec
	if len(s.InitContainers) != 1 || len(s.Containers) != 2 {
		t.Fatalf("containers: %d init, %d", len(s.InitContainers), len(s.Containers))
	}
	init, gate, agent := s.InitContainers[0], s.Containers[0], s.Containers[1]
	if c := init.SecurityContext.Capabilities; !reflect.DeepEqual(c.Add, []corev1.Capability{"NET_ADMIN"}) || !reflect.DeepEqual(c.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("init capabilities %+v", c)
	}
	for _, c := range []corev1.Container{gate, agent} {
		sc := c.SecurityContext
		if len(sc.Capabilities.Add) != 0 || *sc.AllowPrivilegeEscalation || !*sc.RunAsNonRoot {
			t.Errorf("%s: %+v", c.Name, sc)
		}
	}
	if *agent.SecurityContext.RunAsUser != contract.AgentUID || *gate.SecurityContext.RunAsUser != 13 {
		t.Errorf("uids: agent %d, gate %d", *agent.SecurityContext.RunAsUser, *gate.SecurityContext.RunAsUser)
	}
	for _, vm := range agent.VolumeMounts {
		if vm.Name == "gate-files" {
			t.Errorf("the agent mounts the gate's Secret")
		}
		if vm.Name == "pod" && !vm.ReadOnly {
			t.Errorf("the agent can write the init's record")
		}
	}
	if *s.AutomountServiceAccountToken || s.HostNetwork {
		t.Errorf("service account token or host network")
	}
}

func TestRenderRefuses(t *testing.T) {
	for name, edit := range map[string]func(*Options){
		"name":        func(o *Options) { o.Name = "Has_Caps" },
		"no image":    func(o *Options) { o.GateImage = "" },
		"no gate uid": func(o *Options) { o.Policy.GateUID = 0 },
		"memory":      func(o *Options) { o.Memory = "lots" },
		"no command":  func(o *Options) { o.Command = nil },
	} {
		o := options()
		edit(&o)
		if _, err := Render(o); !errors.Is(err, ErrOptions) {
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
	}
}
