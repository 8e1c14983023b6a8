// The Kubernetes pod form (aisb kube) under podman kube play, in one test
// of about 400 lines: the rendered pod against the test upstream, the same
// pod without its table (the control) and the pods whose init container
// left no record or a tampered one (fail closed) run side by side.

package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/kube"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// kubeConfig admits kube.test, where the gate sets a key, and resolves
// through the test upstream.
func kubeConfig() string {
	return dnsConfig() + `allowed_hosts = ["kube.test"]
upstream_ca = ["` + filepath.Join(testhost.StateDir, "ca.pem") + `"]

[[credentials]]
host = "kube.test"
header = "x-api-key"
env = "TEST_KUBE_KEY"
`
}

// kubePod is one pod played: its manifest's path, its name, what its agent
// printed and how it ended, and its gate's log.
type kubePod struct {
	name, path  string
	agent       testhost.Result
	code        int
	gateLog     string
	agentStderr string
}

// play runs the manifest with podman kube play, waits for the agent
// container to end, reads both logs and removes the pod.
func (p *kubePod) play(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { testhost.Podman(t, "kube", "down", "--force", p.path) })
	if r := testhost.Podman(t, "kube", "play", "--network", "pasta", p.path); r.Code != 0 {
		t.Errorf("%s: podman kube play: %s\ninit container: %s", p.name, r, testhost.Podman(t, "logs", p.name+"-"+kube.InitName))
		p.code = -1
		return
	}
	agent := p.name + "-" + kube.AgentName
	w := testhost.Podman(t, "wait", agent)

	p.code, _ = strconv.Atoi(strings.TrimSpace(w.Stdout))
	p.agent = testhost.Podman(t, "logs", agent)
	p.gateLog = testhost.Podman(t, "logs", p.name+"-"+kube.GateName).Stdout
	if r := testhost.Podman(t, "kube", "down", "--force", p.path); r.Code != 0 {
		t.Errorf("%s: podman kube down: %s", p.name, r)
	}
	if r := testhost.Podman(t, "pod", "exists", p.name); r.Code == 0 {
		t.Errorf("%s: the pod is still there after podman kube down", p.name)
	}
	// Podman's name filter matches a part of the name, and the sibling
	// pods (NAME-ctl, NAME-none, …) may still be running: only this pod's
	// own volumes and secrets count, NAME-<one word>.
	var left []string
	for _, l := range strings.Fields(testhost.Podman(t, "volume", "ls", "-q").Stdout +
		testhost.Podman(t, "secret", "ls", "--noheading", "--format", "{{.Name}}").Stdout) {
		if rest, ok := strings.CutPrefix(l, p.name+"-"); ok && !strings.Contains(rest, "-") {
			left = append(left, l)
		}
	}
	if len(left) > 0 {
		t.Errorf("%s: left after podman kube down: %s", p.name, strings.Join(left, " "))
	}
}

// variant rewrites the rendered manifest's Pod (decoded strictly) with edit
// and writes it for the test user under a name of its own.
func variant(t *testing.T, manifest []byte, name string, edit func(*corev1.Pod)) *kubePod {
	t.Helper()
	objs, err := kube.Decode(manifest)
	if err != nil {
		t.Fatalf("decode the rendered manifest: %v", err)
	}
	var b bytes.Buffer
	for i, o := range objs {
		// Each variant has a ConfigMap and a Secret of its own: podman
		// refuses to replace an immutable one another pod uses.
		switch o := o.(type) {
		case *corev1.ConfigMap:
			o.Name = name + "-policy"
		case *corev1.Secret:
			o.Name = name + "-gate"
		case *corev1.Pod:
			old := o.Name
			o.Name = name
			// podman keeps an init container of this type after it ran:
			// its log says why, should it fail.
			o.Annotations = map[string]string{"io.podman.annotations.init.container.type": "always"}
			for j := range o.Spec.Volumes {
				v := &o.Spec.Volumes[j]
				if v.ConfigMap != nil {
					v.ConfigMap.Name = name + "-policy"
				}
				if v.Secret != nil {
					v.Secret.SecretName = name + "-gate"
				}
				if v.EmptyDir != nil && strings.HasPrefix(v.Name, old+"-") {
					v.Name = name + strings.TrimPrefix(v.Name, old)
				}
			}
			for _, c := range append(o.Spec.InitContainers, o.Spec.Containers...) {
				for j := range c.VolumeMounts {
					if m := &c.VolumeMounts[j]; strings.HasPrefix(m.Name, old+"-") {
						m.Name = name + strings.TrimPrefix(m.Name, old)
					}
				}
			}
			edit(o)
		}
		y, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	path := filepath.Join(testhost.AgentDir(t), name+".yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return &kubePod{name: name, path: path}
}

// TestKubePod: the pod aisb kube renders, played rootless by podman kube
// play, admits a listed name with its audit line, refuses an unlisted one,
// drops direct TCP, UDP, DNS and IPv6, keeps the agent from its table and
// from the gate's uid, has the gate set the key the agent only holds a
// placeholder of, and is gone after podman kube down. Controls: the same
// pod without its init container (no table) reaches the upstream directly;
// with the init's record missing or tampered the agent exits 77 and never
// runs its command.
func TestKubePod(t *testing.T) {
	parallel(t)
	start := time.Now()
	base := testBaseImage(t)
	a := newAisb(t, base, kubeConfig())

	// The images, as a user gets them: aisb image build prints their tags.
	r := a.run(t, "image", "build", "--harness", "shell")
	if r.Code != 0 {
		t.Fatalf("aisb image build: %s", r)
	}
	var sandboxImage, gateImage string
	for _, l := range strings.Split(r.Stdout, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && strings.Contains(f[0], "aisb-gate"):
			gateImage = f[0]
		case len(f) > 0 && strings.Contains(f[0], "aisb-sandbox"):
			sandboxImage = f[0]
		}
	}
	if sandboxImage == "" || gateImage == "" {
		t.Fatalf("aisb image build printed no tags: %s", r)
	}

	up, up6 := testhost.UpstreamAddr, testhost.Upstream6
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	key := "REALKUBEKEY-" + stamp
	// Each direct way out, with the same probe in the control pod.
	direct := []scriptCase{
		{"tcp", "probe tcp " + up + ":80"},
		{"tcp-443", "probe tcp " + up + ":443"},
		{"tcp-22", "probe tcp " + up + ":22"},
		{"udp", "probe udp " + up + ":9999"},
		{"dns", "probe dns " + up + " kube.test"},
		{"dns-tcp", "probe dns-tcp " + up + " kube.test"},
		{"ipv6", "probe tcp [" + up6 + "]:80"},
	}
	cases := []scriptCase{
		{"allowed", `curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://kube.test/kube-allowed-` + stamp},
		{"refused", `curl -sS --max-time 10 -o /dev/null -w '%{http_code}' http://kuberefused.test/`},
		{"cred", `curl -sS --max-time 10 https://kube.test/kube-cred-` + stamp + ` -H 'x-api-key: agent-sent'`},
		{"env", `printenv TEST_KUBE_KEY`},
		{"procs", `cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c R[E]ALKUBEKEY-` + stamp},
		{"procsctl", `CTL=C''ONTROL-` + stamp + ` sh -c 'cat /proc/[0-9]*/environ 2>/dev/null' | tr '\0' '\n' | grep -c C[O]NTROL-` + stamp},
		{"secret", `cat /etc/aisb-gate/squid.conf`},
		{"record", `echo x >> /run/aisb-pod/table.nft`},
		{"literal", `probe http-proxy "$HTTP_PROXY" http://` + up + `/`},
		{"connect-22", `probe http-proxy "$HTTP_PROXY" https://kube.test:22/`},
		{"nft-list", "probe nft list"},
		{"nft-flush", "probe nft flush"},
		{"nft-delete", "probe nft delete"},
		{"netns-no-route", "unshare -rn probe tcp " + up + ":80"},
		{"nft-accept", "probe nft accept"},
		{"userns-nft", "unshare -r probe nft flush"},
		{"gate-uid", "setpriv --reuid=13 --regid=13 --clear-groups id -u"},
		{"suid", "probe-suid status"},
	}
	script := renderScript(cases) + concurrently(direct) + "echo agent-ran\n"

	manifest := filepath.Join(testhost.AgentDir(t), "pod.yaml")
	name := "aisb-kube-" + stamp
	mark := headersMark(t)
	rendered := time.Now()
	r = a.runEnv(t, []string{"TEST_KUBE_KEY=" + key}, "kube", "--name", name, "--harness", "shell",
		"--sandbox-image", sandboxImage, "--gate-image", gateImage, "-o", manifest, "--", "/bin/sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("aisb kube: %s", r)
	}
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(key)) && !bytes.Contains(b, []byte("kind: Secret")) {
		t.Fatal("the key is in the manifest outside its Secret")
	}
	enforced := variant(t, b, name, func(*corev1.Pod) {})
	control := variant(t, b, name+"-ctl", func(p *corev1.Pod) {
		p.Spec.InitContainers = nil
		agent := &p.Spec.Containers[1]
		agent.Command = []string{"/bin/sh", "-c", concurrently(direct) + "echo agent-ran\n"}
	})
	missing := variant(t, b, name+"-none", func(p *corev1.Pod) {
		p.Spec.InitContainers[0].Command = []string{"/bin/true"}
	})
	tampered := variant(t, b, name+"-bad", func(p *corev1.Pod) {
		p.Spec.InitContainers[0].Command = []string{"/bin/sh", "-c", kube.EntrypointPath + " table && echo '# tampered' >>/run/aisb-pod/table.nft"}
	})
	pods := []*kubePod{enforced, control, missing, tampered}
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Go(func() { p.play(t) })
	}
	wg.Wait()
	t.Logf("rendered and played 4 pods in %s (%s in all with the image check)", time.Since(rendered).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if t.Failed() {
		t.FailNow()
	}

	// The control: without the table the same probes get out.
	ctl := parseResults(t, control.agent.Stdout)
	for _, c := range direct {
		if got, ok := ctl[c.name]; !ok || got.code != 0 {
			t.Errorf("control %s: not reachable from the pod without its table (%s): %+v\n%s", c.name, c.argv, got, control.agent)
		}
	}

	// Fail closed: no record, or a tampered one, and the command never ran.
	for _, p := range []*kubePod{missing, tampered} {
		if p.code != 77 || strings.Contains(p.agent.Stdout, "agent-ran") {
			t.Errorf("%s: the agent exited %d, want 77 without running its command: %s", p.name, p.code, p.agent)
		}
		if !strings.Contains(p.agent.Stderr, "record of the table") {
			t.Errorf("%s: the agent does not say why: %s", p.name, p.agent)
		}
	}

	if enforced.code != 0 || !strings.Contains(enforced.agent.Stdout, "agent-ran") {
		t.Fatalf("the pod's agent: exit %d: %s", enforced.code, enforced.agent)
	}
	res := parseResults(t, enforced.agent.Stdout)
	if os.Getenv("KUBE_DEBUG") != "" {
		t.Logf("agent: %s\ngate: %s", enforced.agent, enforced.gateLog)
	} else if got := res["cred"]; got.code != 0 {
		// squid's own lines say why a bumped tunnel failed (once: 500,
		// "terminated", under make test's load).
		t.Logf("the gate's log, squid's own lines: %s", squidLines(enforced.gateLog, 8<<10))
	}
	want := func(name string, code int, sub string) {
		t.Helper()
		got, ok := res[name]
		if !ok || (code >= 0 && got.code != code) || (code < 0 && got.code == 0) || !strings.Contains(got.out, sub) {
			t.Errorf("%s: %+v, want exit %d and %q", name, got, code, sub)
		}
	}
	want("allowed", 0, "200")
	want("refused", 0, "403")
	want("cred", 0, "aisb-upstream https host=kube.test path=/kube-cred-"+stamp)
	want("env", 0, "aisb-placeholder-the-gate-sets-the-real-key")
	want("procs", -1, "0")
	want("procsctl", 0, "1")
	want("secret", -1, "No such file")
	want("record", -1, "")
	want("literal", -1, "403")
	want("connect-22", -1, "Forbidden")
	want("nft-list", -1, "blocked")
	want("nft-delete", -1, "blocked")
	want("netns-no-route", -1, "blocked")
	want("nft-flush", -1, "blocked")
	want("nft-accept", -1, "blocked")
	want("userns-nft", -1, "blocked")
	want("gate-uid", -1, "")
	want("suid", 0, "euid: 1000")
	for _, c := range direct {
		want(c.name, 1, "blocked")
	}
	// The gate set the real key on the way out; the agent's own is gone.
	var sawKey bool
	for _, req := range upstreamRequests(t, mark) {
		if req.Path != "/kube-cred-"+stamp {
			continue
		}
		sawKey = true
		if got := req.Headers["X-Api-Key"]; len(got) != 1 || got[0] != key {
			t.Errorf("the upstream got x-api-key %q, want the real key alone", got)
		}
	}
	if !sawKey {
		t.Errorf("the upstream never saw the credential request")
	}

	// The audit: the gate's log, converted by aisb kube audit.
	events := kubeAudit(t, a, enforced.gateLog)
	find := func(host, rule string) bool {
		for _, e := range events {
			if e.Host == host && e.Rule == rule {
				return true
			}
		}
		return false
	}
	if !find("kube.test", audit.RuleAllowed) {
		t.Errorf("no allowed event for kube.test in the pod's audit: %+v", events)
	}
	if !find("kuberefused.test", audit.RuleNotListed) {
		t.Errorf("no not_listed event for kuberefused.test in the pod's audit: %+v", events)
	}
	for _, e := range events {
		if e.Rule == audit.RuleUntagged || e.Rule == audit.RuleMalformed {
			t.Errorf("an event no request made (the agent's wait for the gate?): %+v", e)
		}
	}
	var cred bool
	for _, e := range events {
		cred = cred || (e.Host == "kube.test" && e.Credential == "TEST_KUBE_KEY")
	}
	if !cred {
		t.Errorf("no event names the credential the gate set: %+v", events)
	}
	t.Logf("TestKubePod took %s", time.Since(start).Round(time.Millisecond))
}

// concurrently runs each case in the background (a blocked one waits out
// the probe's timeout) and prints their results once all have ended.
func concurrently(cases []scriptCase) string {
	var b strings.Builder
	for i, c := range cases {
		fmt.Fprintf(&b, "(\n%s) >/tmp/aisb-case-%d 2>&1 &\n", renderScript([]scriptCase{c}), i)
	}
	b.WriteString("wait\ncat /tmp/aisb-case-*\n")
	return b.String()
}

// kubeAudit converts a gate's log with aisb kube audit, as a user would.
func kubeAudit(t *testing.T, a *aisbUser, log string) []audit.Event {
	t.Helper()
	in := filepath.Join(testhost.AgentDir(t), "gate.log")
	if err := os.WriteFile(in, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := a.harness().Command(t, t.Context(), a.containerHost(t), nil, "kube", "audit")
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdin = f
	r := testhost.Run(t, cmd)
	if r.Code != 0 {
		t.Fatalf("aisb kube audit: %s", r)
	}
	var out []audit.Event
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var e audit.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("aisb kube audit printed %q: %v", l, err)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		t.Fatalf("aisb kube audit converted nothing of %q", log)
	}
	return out
}

// squidLines is what of a gate's log is squid's own (not its access log's
// lines), its last max bytes, quoted.
func squidLines(log string, max int) string {
	var own []string
	for _, l := range strings.Split(log, "\n") {
		if l != "" && !strings.HasPrefix(l, "aisb") {
			own = append(own, l)
		}
	}
	out := strings.Join(own, "\n")
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return strconv.Quote(out)
}
