package squidconf

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

// Credential is one header the gate sets on HTTPS requests to one host.
// Whatever the sandbox sent in that header is dropped, over HTTP and HTTPS.
type Credential struct {
	Name   string         // what the audit calls it (the environment name it came from)
	Host   allowlist.Host // an exact host name: no domain, no address
	Header string         // the header's name
	Value  string         // the header's whole value, prefix included; never logged
}

// Credential errors, matched with errors.Is.
var (
	ErrCredentialHost   = errors.New("a credential host must be one exact name")
	ErrCredentialHeader = errors.New("not an HTTP header name")
	ErrCredentialValue  = errors.New("the value has characters squid.conf cannot carry")
	ErrCredentialName   = errors.New("a credential name is letters, digits and _")
)

var (
	headerRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`)
	credNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// Check says what is wrong with a credential; its error never contains the value.
func (c Credential) Check() error {
	if again, err := allowlist.ParseHost(c.Host.String()); err != nil || again != c.Host || c.Host.IsAddr() || c.Host.IsNet() || strings.HasPrefix(c.Host.String(), ".") {
		return fmt.Errorf("credential %s: host %q: %w", c.Name, c.Host.String(), ErrCredentialHost)
	}
	if !credNameRE.MatchString(c.Name) {
		return fmt.Errorf("credential %q: %w", c.Name, ErrCredentialName)
	}
	if !headerRE.MatchString(c.Header) {
		return fmt.Errorf("credential %s: header %q: %w", c.Name, c.Header, ErrCredentialHeader)
	}
	if c.Value == "" || strings.TrimSpace(c.Value) != c.Value {
		return fmt.Errorf("credential %s: the value is empty or has surrounding space: %w", c.Name, ErrCredentialValue)
	}
	for _, r := range c.Value {
		// Printable ASCII but the quote and the backslash, which would end
		// or escape squid's quoted string.
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return fmt.Errorf("credential %s: %w (only printable ASCII without \" or \\)", c.Name, ErrCredentialValue)
		}
	}
	return nil
}

// hostKey and headerKey identify a credential's target for duplicates.
func (c Credential) hostKey() string { return c.Host.String() + " " + strings.ToLower(c.Header) }

// CheckCredentials checks every credential and refuses two for one header of one host.
func CheckCredentials(creds []Credential) error {
	seen := map[string]string{}
	for _, c := range creds {
		if err := c.Check(); err != nil {
			return err
		}
		if other, ok := seen[c.hostKey()]; ok {
			return fmt.Errorf("credentials %s and %s both set %s for %s; keep one", other, c.Name, c.Header, c.Host.String())
		}
		seen[c.hostKey()] = c.Name
	}
	return nil
}

// CredentialHosts are the distinct hosts of creds, in order.
func CredentialHosts(creds []Credential) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range creds {
		if h := c.Host.String(); !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}

// squidQuote escapes a value for a squid.conf quoted logformat string; Check
// has already refused quotes, backslashes and control characters.
func squidQuote(v string) string { return `"` + strings.ReplaceAll(v, "%", "%%") + `"` }
