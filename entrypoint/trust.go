package entrypoint

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// SystemBundle is the image's CA bundle. The session CA is appended to it
// before the privilege drop, and aisb points SSL_CERT_FILE,
// NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, GIT_SSL_CAINFO and CURL_CA_BUNDLE
// at it, so every tool in the image trusts the gate for credential hosts.
const SystemBundle = "/etc/ssl/certs/ca-certificates.crt"

// CABundleEnv are the variables aisb sets to SystemBundle when a session
// has a CA: tools that read no system store (Node, Python requests) or
// would read another one (git and curl builds) use the bundle through them.
var CABundleEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"}

// ErrSessionCA is wrapped when the policy's session CA is not a certificate.
var ErrSessionCA = errors.New("the session CA is not one PEM certificate")

// checkSessionCA accepts exactly one PEM CERTIFICATE block and nothing else.
func checkSessionCA(ca []byte) error {
	blk, rest := pem.Decode(ca)
	if blk == nil || blk.Type != "CERTIFICATE" || len(blk.Headers) > 0 || len(bytes.TrimSpace(rest)) > 0 {
		return ErrSessionCA
	}
	return nil
}

// trustSessionCA appends the session CA to bundle (created, with its
// directory, when the image has none). Runs as root before the drop: the
// agent cannot write the bundle afterwards.
func trustSessionCA(ca []byte, bundle string) error {
	if err := checkSessionCA(ca); err != nil {
		return err
	}
	old, err := os.ReadFile(bundle)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", bundle, err)
	}
	if bytes.Contains(old, bytes.TrimSpace(ca)) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
		return err
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	tmp := bundle + ".aisb-tmp"
	if err := os.WriteFile(tmp, append(old, ca...), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", bundle, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return err
	}
	// The bundle may be a symlink into the image (Debian's is a file); the
	// rename replaces the name the tools open.
	if err := os.Rename(tmp, bundle); err != nil {
		return fmt.Errorf("write %s: %w", bundle, err)
	}
	return nil
}
