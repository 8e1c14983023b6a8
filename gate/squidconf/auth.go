package squidconf

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aisb-dev/aisb/gate/audit"
)

// A gate answers its own sandbox only. Both of its ports listen on the
// host's loopback, where any local process can reach them (another user's,
// or the session user's own outside the sandbox): the sandbox proves itself
// with the session's token, which its proxy variables carry as the proxy
// URL's password and every client sends as Proxy-Authorization. The front
// hands tunnels to the TLS port with a second token of its own (the
// cache_peer's login), so the TLS port trusts no source address: it admits
// the front's hand-over and the requests decrypted from a tunnel it bumped,
// nothing else. Both tokens are matched as whole header values by req_header
// ACLs, which resolve nothing and start no helper; squid never forwards
// Proxy-Authorization to an upstream. On the TLS port the hand-over's
// CONNECT marks its connection (annotate_client), and the rules read the
// mark: after the ClientHello squid checks the tunnel again with a CONNECT
// of its own making, which carries the connection's notes but no header.

// Tokens are a gate's two secrets: random, per gate, in squid.conf (which
// only the gate can read) and, for the sandbox's, in the sandbox's
// environment; never in a command line.
type Tokens struct {
	Sandbox string // the sandbox's: ProxyUser's password
	Peer    string // the front's, on its hand-over to the TLS port
}

// NewTokens makes a gate's two tokens: 128 random bits each.
func NewTokens() (Tokens, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Tokens{}, fmt.Errorf("gate tokens: %w", err)
	}
	return Tokens{Sandbox: hex.EncodeToString(b[:16]), Peer: hex.EncodeToString(b[16:])}, nil
}

// ProxyUser is the user name the sandbox's proxy URL carries with its token.
const ProxyUser = "aisb"

// peerUser is the front's user name on the hand-over.
const peerUser = "aisb-gate"

// ErrToken is a token that is not 32 to 128 lower-case hex digits.
var ErrToken = errors.New("gate token: want 32 to 128 lower-case hex digits")

var tokenRE = regexp.MustCompile(`^[0-9a-f]{32,128}$`)

func (t Tokens) check() error {
	if !tokenRE.MatchString(t.Sandbox) || !tokenRE.MatchString(t.Peer) || t.Sandbox == t.Peer {
		return ErrToken
	}
	return nil
}

// basicRE is the regular expression that matches exactly the
// Proxy-Authorization value of user and password.
func basicRE(user, password string) string {
	b64 := strings.TrimPrefix(basicAuth(user, password), "Basic ")
	return `^Basic[[:space:]]+` + strings.ReplaceAll(b64, "+", `\+`) + `$`
}

// basicAuth is the Proxy-Authorization value of user and password.
func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// ProxyAuthorization is the Proxy-Authorization value that proves the
// sandbox with token to its gate, as clients make it from the proxy URL.
func ProxyAuthorization(token string) string { return basicAuth(ProxyUser, token) }

// renderAuthACLs writes the ACLs that say who sent a request.
func renderAuthACLs(line func(string, ...any), t Tokens) {
	line("")
	line("# Who sent it: the session's sandbox proves itself with its token, the")
	line("# front's hand-over with the peer's (see the hand-over below).")
	line("acl gate_sandbox req_header Proxy-Authorization %s", basicRE(ProxyUser, t.Sandbox))
	line("acl gate_from_peer req_header Proxy-Authorization %s", basicRE(peerUser, t.Peer))
	line("# On the TLS port the hand-over's CONNECT marks its connection; what")
	line("# squid checks again there (a CONNECT of its own, after the ClientHello)")
	line("# carries the mark, not the header.")
	line("acl gate_peer_mark annotate_client handed=yes")
	line("acl gate_handed_conn note handed yes")
	line("acl gate_peer_marked all-of gate_from_peer gate_peer_mark")
	line("acl gate_peer any-of gate_handed_conn gate_peer_marked")
}

// renderAuthAccess writes the http_access lines that refuse everyone but
// the sandbox, before any other rule looks at the request. bumped says that
// the gate decrypts tunnels (credential hosts), whose requests arrive on
// the TLS port with no token of their own.
func renderAuthAccess(line func(string, ...any), bumped bool) {
	line("http_access deny gate_at_front !gate_sandbox gate_rule_%s", audit.RuleNotSandbox)
	if bumped {
		line("http_access deny !gate_at_front !gate_peer !gate_bumped gate_rule_%s", audit.RuleNotSandbox)
		return
	}
	line("http_access deny !gate_at_front !gate_peer gate_rule_%s", audit.RuleNotSandbox)
}

// peerLogin is the cache_peer option that sends the front's token.
func peerLogin(t Tokens) string {
	return fmt.Sprintf("login=%s:%s", peerUser, t.Peer)
}
