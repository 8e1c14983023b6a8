package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/harness"
)

// Credential is one [[credentials]] table of the user's own configuration:
// the gate sets Header on HTTPS requests to Host to Prefix followed by the
// value of the user's variable Env. The value never enters the sandbox; the
// variable there holds a placeholder.
type Credential struct {
	Host   string `toml:"host"`
	Header string `toml:"header"`
	Env    string `toml:"env"`
	Prefix string `toml:"prefix"` // e.g. "Bearer " for authorization
}

// credentialKeys are the keys of a [[credentials]] table.
var credentialKeys = []string{"host", "header", "env", "prefix"}

var headerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`)

// checkCredential says what is wrong with one credential, field by field.
func checkCredential(c Credential) (field, msg string) {
	h, err := allowlist.ParseHost(c.Host)
	switch {
	case err != nil:
		return "host", err.Error()
	case h.IsAddr() || h.IsNet() || strings.HasPrefix(c.Host, "."):
		return "host", fmt.Sprintf("%q: a credential goes to one exact host name, not a domain or an address", c.Host)
	case !headerName.MatchString(c.Header):
		return "header", fmt.Sprintf("%q is not an HTTP header name; write one such as \"x-api-key\" or \"authorization\"", c.Header)
	case c.Env == "":
		return "env", "missing; name the variable of your environment that holds the key"
	}
	if msg := CheckEnvName(c.Env); msg != "" {
		return "env", msg
	}
	for _, r := range c.Prefix {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return "prefix", fmt.Sprintf("%q: only printable ASCII without quotes or backslashes, such as \"Bearer \"", c.Prefix)
		}
	}
	return "", ""
}

func checkCredentials(f *File) []Problem {
	var ps []Problem
	seen := map[string]int{}
	for i, c := range f.Config.Credentials {
		field := fmt.Sprintf("credentials[%d]", i)
		if sub, msg := checkCredential(c); msg != "" {
			ps = append(ps, f.problem(field+"."+sub, "%s", msg))
			continue
		}
		key := c.Host + " " + strings.ToLower(c.Header)
		if j, dup := seen[key]; dup {
			ps = append(ps, f.problem(field, "credentials[%d] already sets %s for %s; keep one", j, c.Header, c.Host))
		}
		seen[key] = i
	}
	return ps
}

func checkUpstreamCA(f *File) []Problem {
	var ps []Problem
	for i, p := range f.Config.Network.UpstreamCA {
		if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
			ps = append(ps, f.problem(fmt.Sprintf("network.upstream_ca[%d]", i), "%q: write the absolute path of a PEM file of CA certificates", p))
		}
	}
	return ps
}

// refuseProjectSecrets: a project file, trusted or not, never names
// credentials or the CAs the gate trusts upstream: whoever wrote the
// repository would choose where the user's keys go.
func refuseProjectSecrets(f *File, userFile string) error {
	var ps Problems
	for _, fd := range fields {
		if fd.userOnly != "" && f.Defines(fd.key) {
			ps = append(ps, f.problem(fd.key, "a project's %s can never %s; put them in your own configuration (%s)", ProjectFileName, fd.userOnly, userFile))
		}
	}
	if len(ps) > 0 {
		return ps
	}
	return nil
}

// credentialFlag turns --credential NAME into a credential: one of the
// user's own [[credentials]] with env NAME (already active), or the host and
// header a harness preset knows for NAME.
func (r *Resolved) credentialFlag(name string) (string, bool) {
	if msg := CheckEnvName(name); msg != "" {
		return msg, false
	}
	if slices.ContainsFunc(r.Config.Credentials, func(c Credential) bool { return c.Env == name }) {
		return "", true
	}
	k, ok := harness.KnownCredential(name)
	if !ok {
		return fmt.Sprintf("%s: no harness knows where this key goes; add a [[credentials]] table with host, header and env = %q to your own configuration", name, name), false
	}
	r.Config.Credentials = append(r.Config.Credentials, Credential{Host: k.Host, Header: k.Header, Env: k.Env, Prefix: k.Prefix})
	return "", true
}

// joinCredentials admits every credential host (the user named it to be
// reached) and refuses a credential variable that would also enter the
// sandbox by env.pass or env.set.
func (r *Resolved) joinCredentials() Problems {
	var ps Problems
	for i, c := range r.Config.Credentials {
		if slices.Contains(r.Config.Env.Pass, c.Env) {
			ps = append(ps, Problem{File: "configuration", Field: fmt.Sprintf("credentials[%d]", i), Msg: fmt.Sprintf("%s is a credential and stays on your host; remove it from --env and env.pass", c.Env)})
		}
		if _, set := r.Config.Env.Set[c.Env]; set {
			ps = append(ps, Problem{File: "configuration", Field: fmt.Sprintf("credentials[%d]", i), Msg: fmt.Sprintf("%s is a credential; env.set would give the sandbox another value for it; remove it from env.set", c.Env)})
		}
		if h, err := allowlist.ParseHost(c.Host); err == nil && !allowlist.Covered(r.Allowlist, h) {
			r.Allowlist = allowlist.Add(r.Allowlist, h)
		}
	}
	return ps
}
