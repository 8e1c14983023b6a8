package gate

import (
	"encoding/hex"
	"net"
	"net/url"
	"strconv"

	"github.com/aisb-dev/aisb/gate/squidconf"
)

// newTokens makes a gate's two secrets (squidconf.Tokens).
func newTokens() (squidconf.Tokens, error) { return squidconf.NewTokens() }

// ProxyURL is the proxy URL a sandbox reaches the gate by at host (the
// gate's host address as the sandbox sees it): the front's port, with the
// token that proves the sandbox to the gate. It is a secret: it goes into
// the sandbox's environment, never into a command line or a log.
func (g *Gate) ProxyURL(host string) string {
	u := url.URL{Scheme: "http", User: url.UserPassword(squidconf.ProxyUser, g.token), Host: net.JoinHostPort(host, strconv.Itoa(g.Port))}
	return u.String()
}

// ProxyAuthorization is the header value the sandbox's clients send from
// ProxyURL's credentials (a secret, like ProxyURL).
func (g *Gate) ProxyAuthorization() string { return squidconf.ProxyAuthorization(g.token) }

// validToken reports whether t can be a gate's sandbox token.
func validToken(t string) bool {
	if len(t) != 32 {
		return false
	}
	b, err := hex.DecodeString(t)
	return err == nil && hex.EncodeToString(b) == t
}
