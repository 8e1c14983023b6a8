// The renderer's tests in one file of about 280 lines: golden files, rule
// order, SSH, the live helper and the TLS layer all read the same squid.conf.

package squidconf

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/netaddr"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestRenderGolden(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"api.anthropic.com", ".github.com", "192.0.2.7"})
	ssh, _ := allowlist.Parse([]string{"github.com", ".gitlab.example"})
	conf, err := Render(Config{
		Session: "golden", Port: 41234, TLSPort: 41235, Dir: "/gate", Tokens: testTokens, Allowlist: hosts, SSHHosts: ssh,
		DNS:  []netip.Addr{netip.MustParseAddr("198.51.100.10")},
		Host: netaddr.Host{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("fe80::1"), netip.MustParseAddr("2001:db8::2")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "squid.conf.golden")
	if *update {
		os.WriteFile(path, []byte(conf), 0o644)
	}
	want, _ := os.ReadFile(path)
	if conf != string(want) {
		t.Errorf("rendered config differs from %s; rerun with -update after reading the diff", path)
	}
}

// TestRenderOrder: refusals that need no lookup come before the only ACL
// that resolves, so a refused name is never resolved.
func TestRenderOrder(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"a.example"})
	conf, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Allowlist: hosts})
	if err != nil {
		t.Fatal(err)
	}
	var access []string
	for _, l := range strings.Split(conf, "\n") {
		if strings.HasPrefix(l, "http_access") {
			access = append(access, l)
		}
	}
	// Requests that are not the sandbox's are refused right after the
	// client rule, on the front and on the TLS port.
	rules := []string{audit.RuleClient, audit.RuleNotSandbox, audit.RuleNotSandbox, audit.RuleManager, audit.RuleConnectPort, audit.RuleScheme, audit.RulePort, audit.RuleIPLiteral, audit.RuleSSHNotListed, audit.RuleNotListed, audit.RuleInternal, audit.RuleAllowed}
	for i, r := range rules {
		if !strings.HasSuffix(access[i], "gate_rule_"+r) {
			t.Errorf("http_access line %d is %q, want the %s rule, tag last", i, access[i], r)
		}
		if strings.Contains(access[i], "gate_internal") != (r == audit.RuleInternal) {
			t.Errorf("the resolving ACL appears on line %q", access[i])
		}
	}
	if access[len(access)-1] != "http_access deny all" {
		t.Errorf("last line %q", access[len(access)-1])
	}
}

func TestRenderRefusesUnvalidated(t *testing.T) {
	for _, h := range []allowlist.Host{
		{Name: "evil.example\nhttp_access allow all"},
		{Name: "UPPER.example"},
		{Name: "x"},
	} {
		if _, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Allowlist: []allowlist.Host{h}}); err == nil {
			t.Errorf("rendered unvalidated host %q", h.Name)
		}
	}
	for _, c := range []Config{{Session: "S P", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens}, {Session: "s", Port: 0, TLSPort: 2, Dir: "/gate", Tokens: testTokens}, {Session: "s", Port: 1, TLSPort: 1, Dir: "/gate", Tokens: testTokens}, {Session: "s", Port: 1, TLSPort: 2, Dir: "/ga te"}} {
		if _, err := Render(c); err == nil {
			t.Errorf("rendered %+v", c)
		}
	}
}

// TestRenderSSH: the SSH list opens port 22 for its names only, through the
// same refusals before and the same internal check after; an empty list
// refuses every CONNECT to 22 with its own rule.
func TestRenderSSH(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"a.example"})
	ssh, _ := allowlist.Parse([]string{"git.example", ".forge.example"})
	access := func(c Config) []string {
		t.Helper()
		conf, err := Render(c)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(conf, "\n") {
			if strings.HasPrefix(l, "http_access") {
				out = append(out, l)
			}
		}
		return out
	}
	with := access(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Allowlist: hosts, SSHHosts: ssh})
	want := []string{
		"http_access deny gate_connect !gate_connect_ports gate_rule_connect_port",
		"http_access deny gate_connect gate_ssh_port !gate_ssh_names gate_rule_ssh_not_listed",
		"http_access deny !gate_listed_names !gate_ssh_port gate_rule_not_listed",
		"http_access deny gate_internal gate_rule_internal",
	}
	for _, w := range want {
		if !slices.Contains(with, w) {
			t.Errorf("missing %q in\n%s", w, strings.Join(with, "\n"))
		}
	}
	without := access(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Allowlist: hosts})
	if !slices.Contains(without, "http_access deny gate_connect gate_ssh_port gate_rule_ssh_not_listed") ||
		!slices.Contains(without, "http_access deny !gate_listed_names gate_rule_not_listed") {
		t.Errorf("without SSH hosts:\n%s", strings.Join(without, "\n"))
	}
	onlySSH := access(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, SSHHosts: ssh})
	if !slices.Contains(onlySSH, "http_access deny !gate_ssh_port gate_rule_not_listed") {
		t.Errorf("SSH hosts only:\n%s", strings.Join(onlySSH, "\n"))
	}
	for _, bad := range [][]allowlist.Host{
		{{Addr: netip.MustParseAddr("192.0.2.7")}},
		{{Net: netip.MustParsePrefix("192.0.2.0/24")}},
		{{Name: "evil.example\nhttp_access allow all"}},
	} {
		if _, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, SSHHosts: bad}); err == nil {
			t.Errorf("rendered SSH host %v", bad)
		}
	}
}

// TestRenderHelperOnlyForUnlisted: the live helper is consulted only on the
// refusal lines for unlisted IP literals and names, after the listed ACLs,
// so a listed request never reaches it; without a helper nothing mentions it.
func TestRenderHelperOnlyForUnlisted(t *testing.T) {
	for _, list := range [][]string{{"a.example", "192.0.2.7"}, {"a.example"}, {"192.0.2.7"}, nil} {
		hosts, _ := allowlist.Parse(list)
		conf, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Allowlist: hosts, Helper: &Helper{Program: "/ask/aisb-gatehelper", Socket: "/ask/helper.sock"}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(conf, "external_acl_type gate_live_helper ttl=0 negative_ttl=0 grace=0 ") {
			t.Errorf("%v: no helper definition, or its answers are cached", list)
		}
		if !strings.Contains(conf, " children-startup=0 ") {
			t.Errorf("%v: the live helper is started with squid, not on its first question", list)
		}
		var asking []string
		for _, l := range strings.Split(conf, "\n") {
			if !strings.HasPrefix(l, "http_access") || !strings.Contains(l, "gate_live") {
				continue
			}
			asking = append(asking, l)
			f := strings.Fields(l)
			if f[1] != "deny" || f[len(f)-2] != "!gate_live" {
				t.Errorf("%v: %q: the helper must be the last condition of a deny line", list, l)
			}
			// A listed name fails gate_ip_literal (all digits and dots, or
			// IPv6) at once; every other listed request fails a !listed ACL.
			for _, listed := range []string{"gate_listed_names", "gate_listed_addrs"} {
				if listed == "gate_listed_names" && strings.HasPrefix(l, "http_access deny gate_ip_literal ") {
					continue
				}
				if strings.Contains(conf, "acl "+listed+" ") && !strings.Contains(l, "!"+listed+" ") {
					t.Errorf("%v: %q reaches the helper without first ruling out %s", list, l, listed)
				}
			}
		}
		if len(asking) != 2 || !strings.HasSuffix(asking[0], audit.RuleIPLiteral) || !strings.HasSuffix(asking[1], audit.RuleNotListed) {
			t.Errorf("%v: lines that ask: %q", list, asking)
		}
	}
	conf, _ := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens})
	if strings.Contains(conf, "gate_live") {
		t.Error("a gate without a helper mentions it")
	}
	if _, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Helper: &Helper{Program: "/ask/x y", Socket: "/s"}}); err == nil {
		t.Error("a helper path with a space was rendered")
	}
}

func cred(t *testing.T, name, host, header, value string) Credential {
	t.Helper()
	h, err := allowlist.ParseHost(host)
	if err != nil {
		t.Fatal(err)
	}
	return Credential{Name: name, Host: h, Header: header, Value: value}
}

func TestRenderCredentialsGolden(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"api.anthropic.com", "api.openai.com", ".github.com"})
	conf, err := Render(Config{
		Session: "golden", Port: 41234, TLSPort: 41235, Dir: "/gate", Tokens: testTokens, Allowlist: hosts,
		Credentials: []Credential{
			cred(t, "ANTHROPIC_API_KEY", "api.anthropic.com", "x-api-key", "sk-100%-secret"),
			cred(t, "OPENAI_API_KEY", "api.openai.com", "authorization", "Bearer sk-other"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "squid-credentials.conf.golden")
	if *update {
		os.WriteFile(path, []byte(conf), 0o644)
	}
	want, _ := os.ReadFile(path)
	if conf != string(want) {
		t.Errorf("rendered config differs from %s; rerun with -update after reading the diff", path)
	}
	if !strings.Contains(conf, `request_header_add x-api-key "sk-100%%-secret" `) {
		t.Error("a % in a credential is not escaped for squid's logformat quoting")
	}
}

// TestRenderTLSOrder: every tunnel is peeked; each splice and bump needs the
// SNI helper's yes; anything else is terminated last.
func TestRenderTLSOrder(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"a.example", ".b.example"})
	conf, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Allowlist: hosts,
		Credentials: []Credential{cred(t, "K", "a.example", "x-api-key", "v")}})
	if err != nil {
		t.Fatal(err)
	}
	var bump []string
	for _, l := range strings.Split(conf, "\n") {
		if strings.HasPrefix(l, "ssl_bump") {
			bump = append(bump, l)
		}
	}
	if bump[0] != "ssl_bump peek gate_step1" || bump[len(bump)-1] != "ssl_bump terminate all gate_rule_sni_mismatch" {
		t.Errorf("ssl_bump lines %q", bump)
	}
	for _, l := range bump {
		if (strings.HasPrefix(l, "ssl_bump splice gate_target") || strings.HasPrefix(l, "ssl_bump bump")) && !strings.Contains(l, " gate_sni_present") {
			t.Errorf("%q splices without the SNI helper's answer", l)
		}
	}
	if bump[len(bump)-2] != "ssl_bump splice gate_sni_is_target gate_sni_present" {
		t.Errorf("a ClientHello naming exactly the target (a name allowed live) is not spliced last: %q", bump)
	}
	if !strings.Contains(conf, "ssl_bump bump gate_cred_target_0 gate_cred_sni_0 gate_sni_present gate_bump_mark_0 gate_rule_bumped") {
		t.Error("the credential host is not bumped")
	}
	if strings.Count(conf, "ssl_bump bump") != 1 {
		t.Error("something other than the credential host is bumped")
	}
}

func TestRenderRefusesBadCredentials(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"a.example"})
	for name, c := range map[string]Credential{
		"domain host":    cred(t, "K", ".a.example", "x-api-key", "v"),
		"address host":   cred(t, "K", "192.0.2.7", "x-api-key", "v"),
		"header newline": cred(t, "K", "a.example", "x-api-key\nhttp_access allow all", "v"),
		"header space":   cred(t, "K", "a.example", "x api", "v"),
		"value quote":    cred(t, "K", "a.example", "x-api-key", `v" all`+"\nhttp_access allow all"),
		"value newline":  cred(t, "K", "a.example", "x-api-key", "v\nhttp_access allow all"),
		"value backsl":   cred(t, "K", "a.example", "x-api-key", `v\`),
		"value empty":    cred(t, "K", "a.example", "x-api-key", ""),
		"name":           cred(t, "K K", "a.example", "x-api-key", "v"),
	} {
		_, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Allowlist: hosts, Credentials: []Credential{c}})
		if err == nil {
			t.Errorf("%s: rendered", name)
			continue
		}
		if c.Value != "" && c.Value != "v" && strings.Contains(err.Error(), c.Value) {
			t.Errorf("%s: the error shows the value: %v", name, err)
		}
	}
	dup := []Credential{cred(t, "A", "a.example", "x-api-key", "v"), cred(t, "B", "a.example", "X-Api-Key", "w")}
	if _, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Allowlist: hosts, Credentials: dup}); err == nil {
		t.Error("two credentials for one header of one host rendered")
	}
}

// TestRenderStream: a remote gate's squid writes its access log to stdout
// and its cache log to stderr (aisb follows them through the API), and no
// log file in its directory.
func TestRenderStream(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"remote.test"})
	conf, err := Render(Config{Session: "stream", Port: 41234, TLSPort: 41235, Dir: "/gate", Tokens: testTokens, Allowlist: hosts, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"access_log stdio:/dev/stdout gate_audit", "cache_log /dev/stderr"} {
		if !strings.Contains(conf, want) {
			t.Errorf("the config lacks %q", want)
		}
	}
	if strings.Contains(conf, "/gate/access.log") || strings.Contains(conf, "/gate/cache.log") {
		t.Error("a streamed config still names a log file")
	}
}
