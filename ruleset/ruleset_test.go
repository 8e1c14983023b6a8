package ruleset

import (
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/netnstest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func ep(s string) contract.Endpoint {
	ap := netip.MustParseAddrPort(s)
	return contract.Endpoint{Addr: ap.Addr(), Port: ap.Port()}
}

func ptr[T any](v T) *T { return &v }

// goldenPolicies are rendered to testdata/NAME.nft and, in the kernel test,
// installed and listed back with nft.
var goldenPolicies = map[string]contract.Policy{
	"allow":       {Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("100.64.0.1:41234"))},
	"hostports":   {Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("100.64.0.1:41234")), HostPorts: []contract.Endpoint{ep("100.64.0.1:11434"), ep("100.64.0.1:8000")}},
	"slirp":       {Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("10.0.2.2:3128"))},
	"transparent": {Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("100.64.0.1:41234")), HostPorts: []contract.Endpoint{ep("100.64.0.1:11434")}, Transparent: true},
	"none":        {Version: 1, Mode: contract.ModeNone},
	"pod":         {Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("127.0.0.1:3128")), GateUID: 13},
	"nogate": {Version: 1, Mode: contract.ModeNoGate, Pinned: []netip.Addr{netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("198.51.100.11")},
		PinnedNets: []netip.Prefix{netip.MustParsePrefix("198.51.100.128/25"), netip.MustParsePrefix("192.0.2.0/24")}},
}

func TestGolden(t *testing.T) {
	for name, p := range goldenPolicies {
		rs, err := Build(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		path := filepath.Join("testdata", name+".nft")
		if *update {
			os.WriteFile(path, []byte(rs.Text()), 0o644)
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if rs.Text() != string(want) {
			t.Errorf("%s: rendered\n%s\nwant\n%s", name, rs.Text(), want)
		}
	}
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name    string
		p       contract.Policy
		want    []string // rule texts after loopback and established
		wantErr error
	}{
		{"allow", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("100.64.0.1:3128"))}, []string{"ip daddr 100.64.0.1 tcp dport 3128 accept"}, nil},
		{"duplicate host port folded", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("100.64.0.1:3128")), HostPorts: []contract.Endpoint{ep("100.64.0.1:3128")}}, []string{"ip daddr 100.64.0.1 tcp dport 3128 accept"}, nil},
		{"no-gate", contract.Policy{Version: 1, Mode: contract.ModeNoGate, Pinned: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}, []string{"ip daddr 192.0.2.1 tcp dport 80 accept", "ip daddr 192.0.2.1 tcp dport 443 accept"}, nil},
		{"none", contract.Policy{Version: 1, Mode: contract.ModeNone}, nil, nil},
		{"pod", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("127.0.0.1:3128")), GateUID: 13}, []string{"meta skuid 13 accept", "ip daddr 127.0.0.1 tcp dport 3128 accept"}, nil},
		{"gate uid in none", contract.Policy{Version: 1, Mode: contract.ModeNone, GateUID: 13}, nil, contract.ErrPolicy},
		{"gate uid is the agent's", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("127.0.0.1:3128")), GateUID: contract.AgentUID}, nil, contract.ErrPolicy},
		{"gate uid awaited", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("127.0.0.1:3128")), GateUID: 13, AwaitGate: true}, nil, contract.ErrPolicy},
		{"gate uid is the relay's", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("127.0.0.1:3128")), GateUID: contract.RelayUID}, nil, contract.ErrPolicy},
		{"gate uid transparent", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("127.0.0.1:3128")), GateUID: 13, Transparent: true}, nil, contract.ErrPolicy},
		{"open", contract.Policy{Version: 1, Mode: contract.ModeOpen}, nil, ErrOpen},
		{"version", contract.Policy{Version: 2, Mode: contract.ModeNone}, nil, contract.ErrPolicy},
		{"mode", contract.Policy{Version: 1, Mode: "wide"}, nil, contract.ErrPolicy},
		{"allow without gate", contract.Policy{Version: 1, Mode: contract.ModeAllow}, nil, contract.ErrPolicy},
		{"ipv6 gate", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("[::1]:3128"))}, nil, contract.ErrPolicy},
		{"gate port 0", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("100.64.0.1:0"))}, nil, contract.ErrPolicy},
		{"unspecified", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("0.0.0.0:3128"))}, nil, contract.ErrPolicy},
		{"none with ports", contract.Policy{Version: 1, Mode: contract.ModeNone, HostPorts: []contract.Endpoint{ep("100.64.0.1:1")}}, nil, contract.ErrPolicy},
		{"pinned in allow", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("100.64.0.1:3128")), Pinned: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}, nil, contract.ErrPolicy},
		{"ipv6 pinned", contract.Policy{Version: 1, Mode: contract.ModeNoGate, Pinned: []netip.Addr{netip.MustParseAddr("2001:db8::1")}}, nil, contract.ErrPolicy},
		{"pinned net", contract.Policy{Version: 1, Mode: contract.ModeNoGate, PinnedNets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}, []string{"ip daddr 192.0.2.0/24 tcp dport 80 accept", "ip daddr 192.0.2.0/24 tcp dport 443 accept"}, nil},
		{"unmasked net", contract.Policy{Version: 1, Mode: contract.ModeNoGate, PinnedNets: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24")}}, nil, contract.ErrPolicy},
		{"too wide net", contract.Policy{Version: 1, Mode: contract.ModeNoGate, PinnedNets: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}, nil, contract.ErrPolicy},
		{"net in allow", contract.Policy{Version: 1, Mode: contract.ModeAllow, Gate: ptr(ep("100.64.0.1:3128")), PinnedNets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}, nil, contract.ErrPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Build(tt.p)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			n := len(rs.Rules)
			for _, r := range rs.Rules[2 : n-2] {
				got = append(got, r.text())
			}
			if rs.Rules[0].Kind != Loopback || rs.Rules[1].Kind != Established || strings.Join(got, "\n") != strings.Join(tt.want, "\n") ||
				rs.Rules[n-2].Kind != RejectTCP || rs.Rules[n-1].Kind != RejectAll {
				t.Errorf("rules %v, want loopback, established, %q, the two rejects", rs.Rules, tt.want)
			}
		})
	}
}

// installed applies rs in a fresh namespace and checks that Verify accepts
// it there: the control every kernel test starts from.
func installed(t *testing.T, rs *Ruleset) (*netnstest.NS, *nftables.Conn) {
	t.Helper()
	ns := netnstest.New(t)
	c, err := nftables.New(nftables.WithNetNSFd(ns.FD))
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Apply(c); err != nil {
		t.Fatal(err)
	}
	if err := rs.Verify(c); err != nil {
		t.Fatalf("verify right after apply: %v", err)
	}
	return ns, c
}

// TestKernel installs each golden ruleset in a fresh network namespace, has nft
// list it back after the kernel normalised it, and compares with the golden
// file; then it tampers with the table and checks that Verify notices.
func TestKernel(t *testing.T) {
	for name, p := range goldenPolicies {
		t.Run(name, func(t *testing.T) {
			rs, _ := Build(p)
			ns, _ := installed(t, rs)
			listed := ns.MustRun(t, "nft", "list", "ruleset")
			want, _ := os.ReadFile(filepath.Join("testdata", name+".nft"))
			if listed != string(want) {
				t.Errorf("kernel holds\n%s\nwant\n%s", listed, want)
			}
		})
	}
}

func TestVerifyCatchesTampering(t *testing.T) {
	p := goldenPolicies["hostports"]
	rs, _ := Build(p)
	for _, tamper := range []struct {
		name string
		nft  string
	}{
		{"policy accept", "add chain inet aisb output { type filter hook output priority filter; policy accept; }"},
		{"rule deleted", "delete rule inet aisb output handle 4"},
		{"rule added", "add rule inet aisb output udp dport 53 accept"},
		{"rule changed", "replace rule inet aisb output handle 4 ip daddr 100.64.0.1 tcp dport 22 accept"},
		{"second table", "add table inet other"},
		{"second chain", "add chain inet aisb input { type filter hook input priority filter; policy accept; }"},
		{"priority moved", "delete table inet aisb; add table inet aisb; add chain inet aisb output { type filter hook output priority 10; policy drop; }"},
	} {
		t.Run(tamper.name, func(t *testing.T) {
			ns, c := installed(t, rs)
			if out, err := ns.Command("nft", tamper.nft).CombinedOutput(); err != nil {
				t.Fatalf("tamper: %v %s", err, out)
			}
			if err := rs.Verify(c); !errors.Is(err, ErrMismatch) {
				t.Errorf("verify after %s = %v, want ErrMismatch", tamper.name, err)
			}
		})
	}
}

// TestVerifyCatchesRedirectTampering: the transparent table's second chain
// is read back as closely as the first.
func TestVerifyCatchesRedirectTampering(t *testing.T) {
	rs, _ := Build(goldenPolicies["transparent"])
	for _, tamper := range []struct {
		name string
		nft  string
	}{
		{"redirect chain deleted", "flush chain inet aisb to_relay; delete chain inet aisb to_relay"},
		{"redirect rule added", "add rule inet aisb to_relay meta skuid 1000 tcp dport 8080 dnat ip to 127.0.0.1:999"},
		{"redirect target changed", "flush chain inet aisb to_relay; add rule inet aisb to_relay meta skuid 1000 udp dport 53 dnat ip to 198.51.100.10:53"},
	} {
		t.Run(tamper.name, func(t *testing.T) {
			ns, c := installed(t, rs)
			if out, err := ns.Command("nft", tamper.nft).CombinedOutput(); err != nil {
				t.Fatalf("tamper: %v %s", err, out)
			}
			if err := rs.Verify(c); !errors.Is(err, ErrMismatch) {
				t.Errorf("verify after %s = %v, want ErrMismatch", tamper.name, err)
			}
		})
	}
}
