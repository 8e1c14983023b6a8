package gate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
)

// TestPod: the pod's gate listens on the pod's loopback, keeps its files in
// its emptyDir, logs to the pipe its command makes, and bumps (and makes a
// CA for the agent) only with credentials; a bad upstream_ca is refused.
func TestPod(t *testing.T) {
	list, errs := allowlist.Parse([]string{"kube.example"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	host, _ := allowlist.ParseHost("kube.example")
	g, err := Pod(PodOptions{Allowlist: list, Credentials: []squidconf.Credential{{Name: "KEY", Host: host, Header: "x-api-key", Value: "v"}}})
	if err != nil {
		t.Fatal(err)
	}
	conf := string(g.Files["squid.conf"])
	for _, want := range []string{"http_port 127.0.0.1:3128 name=", "http_port 127.0.0.1:3129 ", "access_log stdio:" + PodRunDir + "/access.log", "tls-cert=" + PodRunDir + "/tls/ca.pem"} {
		if !strings.Contains(conf, want) {
			t.Errorf("squid.conf lacks %q", want)
		}
	}
	for _, k := range []string{"ca.pem", "ca.key", "sni-helper.sh", "upstream.pem"} {
		if _, ok := g.Files[k]; !ok {
			t.Errorf("no %s in the Secret", k)
		}
	}
	if g.CACert == nil || !strings.HasPrefix(g.ProxyURL, "http://aisb:") || !strings.HasSuffix(g.ProxyURL, "@127.0.0.1:3128") {
		t.Errorf("CA %v, proxy URL %q", g.CACert != nil, g.ProxyURL)
	}
	if plain, err := Pod(PodOptions{Allowlist: list}); err != nil || plain.CACert != nil {
		t.Errorf("without credentials: CA %v, %v", plain != nil && plain.CACert != nil, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(bad, []byte("not a certificate"), 0o644)
	if _, err := Pod(PodOptions{Allowlist: list, UpstreamCAs: []string{bad}}); !errors.Is(err, ErrUpstreamCA) {
		t.Errorf("bad upstream_ca: %v", err)
	}
}
