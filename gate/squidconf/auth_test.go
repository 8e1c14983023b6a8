package squidconf

import (
	"errors"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

// testTokens are fixed tokens for the goldens.
var testTokens = Tokens{Sandbox: strings.Repeat("5a", 16), Peer: strings.Repeat("9e", 16)}

// TestRenderRefusesBadTokens: no gate without both tokens, and none whose
// tokens could be typed into squid.conf as anything but one word.
func TestRenderRefusesBadTokens(t *testing.T) {
	for _, tok := range []Tokens{{}, {Sandbox: testTokens.Sandbox}, {Peer: testTokens.Peer},
		{Sandbox: "short", Peer: testTokens.Peer}, {Sandbox: testTokens.Sandbox, Peer: testTokens.Sandbox},
		{Sandbox: strings.Repeat("5A", 16), Peer: testTokens.Peer}, {Sandbox: testTokens.Sandbox + "\nhttp_access allow all", Peer: testTokens.Peer}} {
		_, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: tok})
		if !errors.Is(err, ErrToken) {
			t.Errorf("tokens %q: got %v, want ErrToken", tok, err)
		}
	}
	if _, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens}); err != nil {
		t.Errorf("control: good tokens refused: %v", err)
	}
}

// TestRenderAuthFirst: the refusal of requests that are not the sandbox's
// comes right after the client rule, on both ports, before any rule that
// could admit or resolve; the hand-over carries the peer's token and the
// TLS port trusts no source address.
func TestRenderAuthFirst(t *testing.T) {
	hosts, _ := allowlist.Parse([]string{"allowed.test"})
	for _, creds := range [][]Credential{nil, {cred(t, "K", "allowed.test", "x-api-key", "v")}} {
		conf, err := Render(Config{Session: "s", Port: 1, TLSPort: 2, Dir: "/gate", Tokens: testTokens, Allowlist: hosts, Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		var access []string
		for _, l := range strings.Split(conf, "\n") {
			if strings.HasPrefix(l, "http_access ") {
				access = append(access, l)
			}
		}
		if len(access) < 4 || !strings.Contains(access[0], "!gate_clients") ||
			access[1] != "http_access deny gate_at_front !gate_sandbox gate_rule_not_sandbox" ||
			!strings.HasPrefix(access[2], "http_access deny !gate_at_front !gate_peer ") {
			t.Errorf("credentials %d: the first http_access lines are %q", len(creds), access[:min(4, len(access))])
		}
		if bumped := strings.Contains(access[2], "!gate_bumped"); bumped != (len(creds) > 0) {
			t.Errorf("credentials %d: the TLS port's rule %q (bumped requests are let on only with credentials)", len(creds), access[2])
		}
		for _, want := range []string{
			"acl gate_sandbox req_header Proxy-Authorization ^Basic[[:space:]]+YWlzYjo1YTVhNWE1YTVhNWE1YTVhNWE1YTVhNWE1YTVhNWE1YQ==$",
			"acl gate_handed all-of gate_connect gate_peer !gate_at_front",
			" login=aisb-gate:" + testTokens.Peer,
		} {
			if !strings.Contains(conf, want) {
				t.Errorf("credentials %d: squid.conf lacks %q", len(creds), want)
			}
		}
		if strings.Contains(conf, "src 127.0.0.3") && strings.Contains(conf, "gate_from_front") {
			t.Errorf("credentials %d: squid.conf still trusts the hand-over's source address", len(creds))
		}
	}
}

// TestBasicREQuotesBase64: a '+' of the base64 form is a literal in the
// regular expression, so only the token itself matches.
func TestBasicREQuotesBase64(t *testing.T) {
	// "aisb:>>>" is base64 "YWlzYjo+Pj4=", which holds a '+'.
	if got := basicRE("aisb", ">>>"); got != `^Basic[[:space:]]+YWlzYjo\+Pj4=$` {
		t.Errorf("basicRE = %q", got)
	}
}
