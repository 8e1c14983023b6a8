package gate

import (
	"encoding/base64"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/netaddr"
)

// TestSpec: the gate's container is squid alone on the host's network, as
// the proxy user mapped to the host user, with no capability, no new
// privilege and a read-only root; its directory is mounted read-write and
// the helper's read-only; its labels say whose it is. Spec touches no file.
func TestSpec(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never-made")
	s, err := Spec(Options{Session: "spec-test", Dir: dir, Image: "aisb-gate:x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("Spec made the gate's directory: %v", err)
	}
	if s.Name != "aisb-gate-spec-test" || s.Image != "aisb-gate:x" {
		t.Errorf("name %q, image %q", s.Name, s.Image)
	}
	if !slices.Equal(s.Command, []string{"squid", "-N", "-f", "/gate/squid.conf"}) || len(s.Entrypoint) != 0 {
		t.Errorf("command %q, entrypoint %q: want squid alone", s.Command, s.Entrypoint)
	}
	if s.StopSignal == nil || *s.StopSignal != syscall.SIGINT {
		t.Errorf("stop signal %v, want SIGINT", s.StopSignal)
	}
	if s.NetNS.NSMode != specgen.Host {
		t.Errorf("network %q, want the host's", s.NetNS.NSMode)
	}
	if s.UserNS.NSMode != specgen.KeepID || s.User != "proxy" {
		t.Errorf("user namespace %+v, user %q: want keep-id as proxy", s.UserNS, s.User)
	}
	if !slices.Equal(s.CapDrop, []string{"ALL"}) || len(s.CapAdd) != 0 {
		t.Errorf("capabilities: drop %q, add %q", s.CapDrop, s.CapAdd)
	}
	if s.NoNewPrivileges == nil || !*s.NoNewPrivileges || s.ReadOnlyFilesystem == nil || !*s.ReadOnlyFilesystem || s.ReadWriteTmpfs == nil || !*s.ReadWriteTmpfs {
		t.Error("the gate may gain privileges or write its root")
	}
	if len(s.Mounts) != 1 || s.Mounts[0].Source != dir || s.Mounts[0].Destination != "/gate" || !slices.Equal(s.Mounts[0].Options, []string{"rw"}) {
		t.Errorf("mounts without a helper: %+v", s.Mounts)
	}
	if len(s.Labels) != 2 || s.Labels[engine.LabelKind] != "gate" || s.Labels[engine.LabelSession] != "spec-test" {
		t.Errorf("labels of a long-lived gate: %v", s.Labels)
	}

	s, err = Spec(Options{Session: "spec-test", Dir: dir, Image: "aisb-gate:x", HelperDir: "/run/helper", Owner: "1:2", Finisher: "3:4"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Mounts) != 2 || s.Mounts[1].Source != "/run/helper" || s.Mounts[1].Destination != helperMount || !slices.Equal(s.Mounts[1].Options, []string{"ro"}) {
		t.Errorf("mounts with a helper: %+v", s.Mounts)
	}
	if s.Labels[engine.LabelOwner] != "1:2" || s.Labels[engine.LabelFinisher] != "3:4" {
		t.Errorf("labels of a session gate: %v", s.Labels)
	}
}

// TestSquidConfig: squid.conf is rendered for the paths squid sees (its
// directory and the helper's mount), never the host's.
func TestSquidConfig(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"a.example"})
	o := Options{Session: "s", Dir: "/home/u/.local/state/aisb/s/gate", Allowlist: hosts, DNS: []netip.Addr{netip.MustParseAddr("192.0.2.53")}, HelperDir: "/run/user/1/aisb/s"}
	tokens, err := newTokens()
	if err != nil {
		t.Fatal(err)
	}
	cfg := squidConfig(o, netaddr.Host{}, 4001, 4002, true, tokens)
	if cfg.Dir != "/gate" || cfg.Port != 4001 || cfg.TLSPort != 4002 || !cfg.DefaultCA || cfg.Session != "s" || cfg.Tokens != tokens {
		t.Errorf("config %+v", cfg)
	}
	if cfg.Helper == nil || cfg.Helper.Program != "/ask/"+squidconf.HelperProgram || cfg.Helper.Socket != "/ask/"+squidconf.HelperSocket {
		t.Errorf("helper %+v", cfg.Helper)
	}
	if _, err := squidconf.Render(cfg); err != nil {
		t.Errorf("render: %v", err)
	}
	o.HelperDir = ""
	if cfg := squidConfig(o, netaddr.Host{}, 4001, 4002, false, squidconf.Tokens{}); cfg.Helper != nil {
		t.Errorf("a helper without HelperDir: %+v", cfg.Helper)
	}
}

// TestRunning: the view of a gate another process started refuses what no
// gate has, and names the container after the session.
func TestRunning(t *testing.T) {
	g, err := Running(Known{Session: "s1", Dir: "/d", Port: 4001, TLSPort: 4002, Squid: "10:20"})
	if err != nil || g.Name != ContainerName("s1") || g.Port != 4001 || g.TLSPort != 4002 || g.Squid() != "10:20" || g.Dir != "/d" {
		t.Fatalf("%+v %v", g, err)
	}
	if g, err := Running(Known{Session: "lg", Dir: "/d", Port: 4001}); err != nil || g.TLSPort != 0 {
		t.Errorf("a long-lived gate, TLS port unknown: %+v %v", g, err)
	}
	for _, k := range []Known{
		{Session: "", Dir: "/d", Port: 1},
		{Session: "S 1", Dir: "/d", Port: 1},
		{Session: "s", Dir: "", Port: 1},
		{Session: "s", Dir: "/d", Port: 0},
		{Session: "s", Dir: "/d", Port: 70000},
		{Session: "s", Dir: "/d", Port: 1, TLSPort: 1},
		{Session: "s", Dir: "/d", Port: 1, TLSPort: -1},
	} {
		if _, err := Running(k); !errors.Is(err, ErrKnown) {
			t.Errorf("%+v: %v, want ErrKnown", k, err)
		}
	}
}

// TestTokensAndProxyURL: each gate gets two fresh tokens that squid.conf
// accepts; the sandbox's proxy URL carries the sandbox's, and a long-lived
// gate's record keeps only a well-formed one.
func TestTokensAndProxyURL(t *testing.T) {
	a, err := newTokens()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newTokens()
	if a == b || a.Sandbox == a.Peer || !validToken(a.Sandbox) || !validToken(a.Peer) {
		t.Fatalf("tokens %+v and %+v", a, b)
	}
	g := &Gate{Port: 4001, token: a.Sandbox}
	if got, want := g.ProxyURL("100.64.0.1"), "http://aisb:"+a.Sandbox+"@100.64.0.1:4001"; got != want {
		t.Errorf("ProxyURL = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "x", strings.Repeat("A", 32), a.Sandbox + "0"} {
		if validToken(bad) {
			t.Errorf("validToken(%q)", bad)
		}
	}
}

// TestProxyAuthorizationIsTheURLs: the header the tests speak with is the
// one a client makes from ProxyURL (entrypoint/tunnel's GateFromEnv does
// the same), and the gate's own ACL matches it.
func TestProxyAuthorizationIsTheURLs(t *testing.T) {
	tokens, err := newTokens()
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{Port: 4001, token: tokens.Sandbox}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("aisb:"+tokens.Sandbox))
	if got := g.ProxyAuthorization(); got != want {
		t.Errorf("ProxyAuthorization = %q, want %q", got, want)
	}
}
