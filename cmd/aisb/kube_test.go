package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/aisb-dev/aisb/internal/kube"
)

func kubeEnv(t *testing.T, userConfig string) (project string) {
	t.Helper()
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	os.MkdirAll(filepath.Join(cfg, "aisb"), 0o700)
	if err := os.WriteFile(filepath.Join(cfg, "aisb", "config.toml"), []byte(userConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return t.TempDir()
}

// TestKubeRenders: aisb kube applies the user's configuration and narrows
// it by an untrusted project file as aisb run does; the output decodes
// strictly, and -o writes it for the user alone.
func TestKubeRenders(t *testing.T) {
	project := kubeEnv(t, "version = 1\n[network]\nallowed_hosts = [\"a.example\", \"b.example\"]\n")
	os.WriteFile(filepath.Join(project, ".aisb.toml"), []byte("version = 1\n[network]\nallowed_hosts = [\"a.example\"]\n"), 0o644)
	out := filepath.Join(t.TempDir(), "pod.yaml")
	code, _, errs := runAisb(t, project, "kube", "--harness", "shell", "--sandbox-image", "reg.example/s:1", "--gate-image", "reg.example/g:1", "-o", out, "--", "make", "test")
	if code != 0 {
		t.Fatalf("aisb kube: exit %d: %s", code, errs)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the output: %v %v", fi, err)
	}
	b, _ := os.ReadFile(out)
	objs, err := kube.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	var conf string
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Pod:
			pod = o
		case *corev1.Secret:
			conf = string(o.Data["squid.conf"])
		}
	}
	if pod == nil || conf == "" {
		t.Fatalf("no Pod or no squid.conf in %d objects", len(objs))
	}
	if pod.Name != kube.NameFor(project) || !strings.HasPrefix(pod.Name, "aisb-") {
		t.Errorf("pod name %q", pod.Name)
	}
	if !strings.Contains(conf, "dstdomain -n a.example\n") || strings.Contains(conf, "b.example") {
		t.Errorf("the project file did not narrow the allowlist to a.example:\n%s", conf)
	}
	if got := pod.Spec.Containers[1].Command; strings.Join(got, " ") != kube.EntrypointPath+" pod -- make test" {
		t.Errorf("agent command %q", got)
	}
	// The SandboxTemplate form decodes as well.
	code, stdout, errs := runAisb(t, project, "kube", "--template", "--harness", "shell", "--sandbox-image", "reg.example/s:1", "--gate-image", "reg.example/g:1")
	if code != 0 || !strings.Contains(stdout, "kind: SandboxTemplate") {
		t.Fatalf("--template: exit %d: %s", code, errs)
	}
	if _, err := kube.Decode([]byte(stdout)); err != nil {
		t.Error(err)
	}
}

func TestKubeRefuses(t *testing.T) {
	project := kubeEnv(t, "version = 1\n[network]\nssh_hosts = [\"git.example\"]\n")
	if code, _, errs := runAisb(t, project, "kube", "--harness", "shell"); code != 78 || !strings.Contains(errs, "--sandbox-image and --gate-image") {
		t.Errorf("no images: exit %d, %q", code, errs)
	}
	if code, _, errs := runAisb(t, project, "kube", "--harness", "shell", "--sandbox-image", "s", "--gate-image", "g"); code != 78 || !strings.Contains(errs, "SSH hosts") {
		t.Errorf("ssh hosts: exit %d, %q", code, errs)
	}
}

// TestKubeAudit: the gate's log, squid's own lines among it, becomes JSON
// audit lines.
func TestKubeAudit(t *testing.T) {
	log := "2026/12/03 14:00:00| Starting Squid Cache\n" +
		"aisb2 1796307305.611 pod 127.0.0.1 GET kube.test 80 200 261 TCP_MISS:HIER_DIRECT - - allowed\n" +
		"aisb2 1796307305.729 pod 127.0.0.1 GET kuberefused.test 80 403 3374 TCP_DENIED:HIER_NONE - - not_listed\n" +
		"aisb2 1796307305.510 pod 127.0.0.3 - - - 0 0 NONE_NONE:HIER_NONE - - -\n"
	var out, errb strings.Builder
	code := run([]string{"aisb", "kube", "audit"}, strings.NewReader(log), &out, &errb)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], `"event":"network_allowed"`) || !strings.Contains(lines[1], `"rule":"not_listed"`) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "1 line(s) of squid's own log skipped") {
		t.Errorf("stderr %q", errb.String())
	}
}
