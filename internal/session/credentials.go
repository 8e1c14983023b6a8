package session

import (
	"errors"
	"fmt"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/config"
)

// Placeholder is what a credential's variable holds inside the sandbox: not
// a key anywhere, and replaced by the gate on the way to the credential host.
const Placeholder = "aisb-placeholder-the-gate-sets-the-real-key"

// ErrCredentialNeedsGate is returned for credentials without a session gate
// to set them.
var ErrCredentialNeedsGate = errors.New("credentials are set by a session's own gate")

// gateCredentials reads each credential's value from the user's environment
// (lookup) for the gate. An unset variable is an error, never a silent gap;
// no error message ever carries a value.
func gateCredentials(cs []config.Credential, lookup func(string) (string, bool)) ([]squidconf.Credential, error) {
	var out []squidconf.Credential
	for i, c := range cs {
		v, ok := lookup(c.Env)
		if !ok || v == "" {
			return nil, fmt.Errorf("credentials[%d]: %s is not set in your environment; set it, or drop the credential", i, c.Env)
		}
		h, err := allowlist.ParseHost(c.Host)
		if err != nil {
			return nil, fmt.Errorf("credentials[%d]: %w", i, err)
		}
		gc := squidconf.Credential{Name: c.Env, Host: h, Header: c.Header, Value: c.Prefix + v}
		if err := gc.Check(); err != nil {
			return nil, fmt.Errorf("credentials[%d]: %w", i, err)
		}
		out = append(out, gc)
	}
	return out, nil
}

// checkCredentialMode refuses credentials where no session gate sets them.
func checkCredentialMode(n int, mode contract.Mode, gateName string) error {
	switch {
	case n == 0:
		return nil
	case mode != contract.ModeAllow:
		return fmt.Errorf("%w: network mode %s has none; use mode allow, or drop the credentials", ErrCredentialNeedsGate, mode)
	case gateName != "":
		return fmt.Errorf("%w: the long-lived gate %s is shared and holds no session's keys; run without --gate, or drop the credentials", ErrCredentialNeedsGate, gateName)
	}
	return nil
}

// credentialEnv puts the placeholder in each credential's variable.
func credentialEnv(env map[string]string, creds []squidconf.Credential) {
	for _, c := range creds {
		env[c.Name] = Placeholder
	}
}

// caEnv points the tools' CA variables at the bundle holding the session CA.
func caEnv(env map[string]string) {
	for _, k := range contract.CABundleEnv {
		env[k] = contract.CABundle
	}
}
