package gate

import (
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/tlsca"
)

// Rules of the TLS layer: the gate peeks at every tunnel's ClientHello and
// splices it only when the name in it (SNI) is admitted for the tunnel's own
// target; credential hosts are bumped instead so the gate can set their key.
const (
	RuleSNIMismatch = "sni_mismatch" // the ClientHello names a host not admitted for the CONNECT target
	RuleNoSNI       = "no_sni"       // a tunnel to a name whose ClientHello names no host
	RuleNotTLS      = "not_tls"      // the tunnel did not start with a TLS ClientHello
	RuleTerminated  = "terminated"   // squid closed the tunnel at the TLS step without a rule of ours
	RuleBumped      = "bumped"       // a tunnel to a credential host, decrypted by the gate
	RuleCredential  = "credential"   // an HTTPS request to a credential host; the gate set its header
	RuleWebsocket   = "websocket"    // an upgrade to a websocket inside a bumped tunnel
	// RuleUpstream is a request to port 443 that squid answered itself with
	// 502/503 before any rule: inside a bumped tunnel, the credential host
	// could not be reached or its certificate did not verify (measured: logged
	// without a rule and without the TLS step). The key was not sent.
	RuleUpstream = "upstream_failed"
)

// Paths inside the gate's directory (as squid sees it).
const (
	tlsDir         = "tls"
	caCertFile     = tlsDir + "/ca.pem"        // the session CA the sandbox trusts
	caKeyFile      = tlsDir + "/ca.key"        // its key; only in this directory, removed with it
	upstreamCAFile = tlsDir + "/upstream.pem"  // the CAs bumped upstreams must chain to
	sniHelperFile  = tlsDir + "/sni-helper.sh" // answers whether a ClientHello carried a name
	certDBDir      = tlsDir + "/certs"         // squid's generated certificates
)

// sniHelper is squid's external ACL helper for two questions about a
// ClientHello. "present": did it name a host? squid's own ssl::server_name
// falls back to the CONNECT target when the SNI is missing, so presence needs
// a check of its own. "target": does it name exactly the CONNECT target (a
// name the front admitted, from the list or live)? It reads
// "%ssl::>sni %DST QUESTION" per line ("-" for a missing value; squid
// lower-cases the target, a name with upper case in the SNI is no match) and
// answers OK or ERR.
const sniHelper = `while read -r sni dst question rest; do
	case "$question:$sni" in
	present:-|present:) echo ERR ;;
	present:*) echo OK ;;
	target:-|target:) echo ERR ;;
	target:*) if [ "${sni%.}" = "${dst%.}" ]; then echo OK; else echo ERR; fi ;;
	*) echo ERR ;;
	esac
done
`

// renderTLSACLs defines the ACLs of the TLS layer; they must precede the
// http_access lines that use some of them. names are the allowlist's name
// entries.
func renderTLSACLs(line func(string, ...any), dir string, names []string, creds []Credential) {
	line("")
	line("# TLS: every tunnel's ClientHello is peeked at (not decrypted). It is")
	line("# spliced only when it names a host (SNI) that the allowlist entry")
	line("# admitting the CONNECT target also admits; credential hosts are bumped")
	line("# (decrypted with the session CA) so the gate can set their header.")
	line("acl gate_step1 at_step SslBump1")
	line("external_acl_type gate_sni ttl=60 negative_ttl=60 children-max=1 children-startup=1 %%ssl::>sni %%DST /bin/sh %s/%s", dir, sniHelperFile)
	line("acl gate_sni_present external gate_sni present")
	line("acl gate_sni_is_target external gate_sni target")
	for _, r := range []string{RuleSNIMismatch, RuleNoSNI, RuleNotTLS, RuleBumped, RuleCredential, RuleWebsocket} {
		line("acl gate_rule_%s annotate_transaction rule=%s", r, r)
	}
	for i, n := range names {
		line("acl gate_target_%d dstdomain -n %s", i, n)
		line("acl gate_sni_%d ssl::server_name %s", i, n)
	}
	if len(creds) == 0 {
		return
	}
	// A bumped tunnel's connection is marked when it is bumped; every
	// request decrypted from it carries the mark (and only those: a plain
	// "GET https://" to the gate stays refused by the scheme rule).
	line("acl gate_bump_mark annotate_client bumped=yes")
	line("acl gate_bumped note bumped yes")
	line("acl gate_upgrade req_header Upgrade .")
	for i, h := range CredentialHosts(creds) {
		line("acl gate_cred_target_%d dstdomain -n %s", i, h)
		line("acl gate_cred_sni_%d ssl::server_name %s", i, h)
	}
	for i, c := range creds {
		line("acl gate_cred_note_%d annotate_transaction cred=%s", i, c.Name)
	}
}

// renderCredentialAccess writes the http_access lines for requests inside a
// bumped tunnel; they come after every refusal and before the final allow.
func renderCredentialAccess(line func(string, ...any), creds []Credential) {
	if len(creds) == 0 {
		return
	}
	line("http_access deny gate_bumped gate_upgrade gate_rule_%s", RuleWebsocket)
	for i := range CredentialHosts(creds) {
		line("http_access allow gate_bumped gate_cred_target_%d gate_rule_%s", i, RuleCredential)
	}
}

// renderTLSRules writes the ssl_bump decisions and, for credential hosts,
// the upstream checks and the headers. defaultCA says whether squid adds its
// image's trust store for bumped upstreams (when the host's was not found).
func renderTLSRules(line func(string, ...any), dir string, names []string, creds []Credential, defaultCA bool) {
	line("")
	line("# Every splice and bump line requires the helper's positive answer: a")
	line("# helper that failed splices nothing.")
	for i := range CredentialHosts(creds) {
		line("sslproxy_cert_adapt setCommonName gate_cred_target_%d", i)
	}
	line("ssl_bump peek gate_step1")
	line("ssl_bump splice gate_ip_literal !gate_sni_present")
	line("ssl_bump terminate gate_ip_literal gate_rule_%s", RuleSNIMismatch)
	line("ssl_bump terminate !gate_sni_present gate_rule_%s", RuleNoSNI)
	for i := range CredentialHosts(creds) {
		line("ssl_bump bump gate_cred_target_%d gate_cred_sni_%d gate_sni_present gate_bump_mark gate_rule_%s", i, i, RuleBumped)
	}
	for i := range names {
		line("ssl_bump splice gate_target_%d gate_sni_%d gate_sni_present", i, i)
	}
	// A ClientHello naming exactly the tunnel's target: also a name allowed
	// live, which no line above lists.
	line("ssl_bump splice gate_sni_is_target gate_sni_present")
	line("ssl_bump terminate all gate_rule_%s", RuleSNIMismatch)
	line("on_unsupported_protocol respond all gate_rule_%s", RuleNotTLS)
	if len(creds) == 0 {
		line("")
		line("# Nothing is bumped, so the gate never opens TLS to an upstream itself:")
		line("# no trust store to load at start.")
		line("tls_outgoing_options default-ca=off")
		return
	}
	line("")
	line("# Bumped upstreams must chain to the host's trust store or network.upstream_ca.")
	ca := "off"
	if defaultCA {
		ca = "on"
	}
	line("tls_outgoing_options cafile=%s/%s default-ca=%s min-version=1.2", dir, upstreamCAFile, ca)
	line("sslcrtd_program /usr/lib/squid/security_file_certgen -s %s/%s -M 4MB", dir, certDBDir)
	line("sslcrtd_children 2 startup=1 idle=1")
	line("")
	line("# Credentials: whatever the sandbox sent in the header is dropped; the")
	line("# real value is added to HTTPS requests to the credential host only.")
	hosts := CredentialHosts(creds)
	for i, c := range creds {
		hi := indexOf(hosts, c.Host.String())
		line("request_header_access %s deny gate_cred_target_%d", c.Header, hi)
		line("request_header_add %s %s gate_cred_target_%d gate_bumped gate_cred_note_%d", c.Header, squidQuote(c.Value), hi, i)
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// HostTrustStores are where the host's system CA bundle is looked for, in order.
var HostTrustStores = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",             // openSUSE
	"/etc/ssl/cert.pem",                  // Alpine, macOS
}

// ErrUpstreamCA wraps a network.upstream_ca file that holds no certificate.
var ErrUpstreamCA = errors.New("not a PEM file of CA certificates")

// upstreamBundle is the host's trust store (the first of HostTrustStores
// found) followed by the user's extra CA files. found says whether the
// host's store was there; when not, squid adds its image's own.
func upstreamBundle(extra []string) (bundle []byte, found bool, err error) {
	for _, p := range HostTrustStores {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			bundle, found = append(b, '\n'), true
			break
		}
	}
	for _, p := range extra {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, false, fmt.Errorf("network.upstream_ca: %w", err)
		}
		if blk, _ := pem.Decode(b); blk == nil || blk.Type != "CERTIFICATE" {
			return nil, false, fmt.Errorf("network.upstream_ca: %s: %w", p, ErrUpstreamCA)
		}
		bundle = append(append(bundle, b...), '\n')
	}
	return bundle, found, nil
}

// SecretPaths are what of a gate directory holds secrets: squid.conf (the
// credentials' values) and the TLS directory (the session CA's key, the keys
// squid generated). They go with the session; the access log stays.
func SecretPaths(dir string) []string {
	return []string{filepath.Join(dir, "squid.conf"), filepath.Join(dir, tlsDir)}
}

// RemoveSecrets removes SecretPaths(dir); whoever finishes the gate does,
// once its squid is gone (aisb, or the session's watchdog after aisb handed
// the gate over).
func RemoveSecrets(dir string) error {
	var errs []error
	for _, p := range SecretPaths(dir) {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove the gate's secrets: %w", err))
		}
	}
	return errors.Join(errs...)
}

// WriteTLSFiles makes a fresh session CA for the credential hosts and writes
// what squid needs into dir/tls, readable by the gate alone. It returns the
// CA certificate and whether squid must add its own trust store.
func WriteTLSFiles(dir string, creds []Credential, upstreamCAs []string) (caCert []byte, defaultCA bool, err error) {
	if err := checkCredentials(creds); err != nil {
		return nil, false, err
	}
	tdir := filepath.Join(dir, tlsDir)
	if err := os.RemoveAll(tdir); err != nil {
		return nil, false, fmt.Errorf("session tls: %w", err)
	}
	if err := os.Mkdir(tdir, 0o700); err != nil {
		return nil, false, fmt.Errorf("session tls: %w", err)
	}
	if err := chownToParent(tdir); err != nil {
		return nil, false, fmt.Errorf("session tls: %w", err)
	}
	ca, err := tlsca.New(CredentialHosts(creds), time.Now())
	if err != nil {
		return nil, false, err
	}
	files := map[string][]byte{caCertFile: ca.Cert, caKeyFile: ca.Key, sniHelperFile: []byte(sniHelper)}
	if len(creds) > 0 {
		bundle, found, err := upstreamBundle(upstreamCAs)
		if err != nil {
			return nil, false, err
		}
		files[upstreamCAFile] = bundle
		defaultCA = !found
	}
	for name, b := range files {
		if err := writePrivate(filepath.Join(dir, name), b); err != nil {
			return nil, false, fmt.Errorf("session tls: %w", err)
		}
	}
	if len(creds) > 0 {
		if err := writeCertDB(filepath.Join(dir, certDBDir)); err != nil {
			return nil, false, fmt.Errorf("session tls: %w", err)
		}
	}
	return ca.Cert, defaultCA, nil
}

// writeCertDB makes squid's empty store of generated certificates, as its
// own `security_file_certgen -c` makes it (TestCertDBAsSquidMakesIt
// compares the two in the gate image): a directory holding an empty
// index.txt, a size file saying 0, and an empty certs directory. Made
// here, before the gate starts, the gate's command is squid alone: a shell
// and the tool used to run first, some 30 ms of the gate's start on a
// 2-core VM. It holds generated keys, so it is the gate's alone.
func writeCertDB(db string) error {
	for _, d := range []string{db, filepath.Join(db, "certs")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
		if err := chownToParent(d); err != nil {
			return err
		}
	}
	if err := writePrivate(filepath.Join(db, "index.txt"), nil); err != nil {
		return err
	}
	return writePrivate(filepath.Join(db, "size"), []byte("0"))
}

// chownToParent gives path its directory's owner when root writes for
// another user's gate (the tests do).
func chownToParent(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Dir(path), &st); err != nil {
		return err
	}
	return os.Lchown(path, int(st.Uid), int(st.Gid))
}

// writePrivate writes a file only its owner can read, never through a link
// (squid can write the gate's directory). The owner is the directory's: when
// root writes for another user's gate (the tests do), the file must still be
// the gate's alone, not root's.
func writePrivate(path string, b []byte) error {
	if err := safefile.Write(path, b, 0o600); err != nil {
		return err
	}
	return chownToParent(path)
}
