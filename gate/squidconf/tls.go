package squidconf

import (
	"fmt"
	"strings"

	"github.com/aisb-dev/aisb/gate/audit"
)

// Paths inside the gate's directory (as squid sees it).
const (
	TLSDir         = "tls"
	CACertFile     = TLSDir + "/ca.pem"        // the session CA the sandbox trusts
	CAKeyFile      = TLSDir + "/ca.key"        // its key; only in this directory, removed with it
	UpstreamCAFile = TLSDir + "/upstream.pem"  // the CAs bumped upstreams must chain to
	SNIHelperFile  = TLSDir + "/sni-helper.sh" // answers whether a ClientHello carried a name
	CertDBDir      = TLSDir + "/certs"         // squid's generated certificates
)

// SNIHelper is squid's external ACL helper for two questions about a
// ClientHello. "present": did it name a host? squid's own ssl::server_name
// falls back to the CONNECT target when the SNI is missing, so presence needs
// a check of its own. "target": does it name exactly the CONNECT target (a
// name the front admitted, from the list or live)? It reads
// "%ssl::>sni %DST QUESTION" per line ("-" for a missing value; squid
// lower-cases the target, a name with upper case in the SNI is no match) and
// answers OK or ERR.
const SNIHelper = `while read -r sni dst question rest; do
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
	line("external_acl_type gate_sni ttl=60 negative_ttl=60 children-max=1 children-startup=1 %%ssl::>sni %%DST /bin/sh %s/%s", dir, SNIHelperFile)
	line("acl gate_sni_present external gate_sni present")
	line("acl gate_sni_is_target external gate_sni target")
	for _, r := range []string{audit.RuleSNIMismatch, audit.RuleNoSNI, audit.RuleNotTLS, audit.RuleBumped, audit.RuleCredential, audit.RuleWebsocket} {
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
	// The mark names the credential host the tunnel was bumped for: the
	// requests decrypted from it may go to that host only, with its key
	// only (the request's own names are the client's to choose).
	line("acl gate_bumped note bumped")
	line("acl gate_upgrade req_header Upgrade .")
	// Inside a bumped tunnel only its own host's requests pass: the mark of
	// the host it was bumped for, the URL's host and the Host header all
	// name it. (ssl::server_name is no help there: on a decrypted request
	// it matches the request's host, which the client chooses.)
	hosts := CredentialHosts(creds)
	var own []string
	for i, h := range hosts {
		line("acl gate_cred_target_%d dstdomain -n %s", i, h)
		line("acl gate_cred_sni_%d ssl::server_name %s", i, h)
		line("acl gate_bump_mark_%d annotate_client bumped=%d", i, i)
		line("acl gate_bumped_for_%d note bumped %d", i, i)
		line("acl gate_cred_hosthdr_%d req_header Host -i ^%s(:443)?$", i, strings.ReplaceAll(h, ".", `\.`))
		line("acl gate_cred_own_%d all-of gate_bumped_for_%d gate_cred_target_%d gate_cred_hosthdr_%d", i, i, i, i)
		own = append(own, fmt.Sprintf("gate_cred_own_%d", i))
	}
	line("acl gate_bumped_own any-of %s", strings.Join(own, " "))
	line("acl gate_bumped_methods method CONNECT TRACE TRACK")
	for _, r := range []string{audit.RuleBumpedMethod, audit.RuleBumpedHost} {
		line("acl gate_rule_%s annotate_transaction rule=%s", r, r)
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
	line("http_access deny gate_bumped gate_upgrade gate_rule_%s", audit.RuleWebsocket)
	for i := range CredentialHosts(creds) {
		line("http_access allow gate_bumped gate_cred_own_%d gate_rule_%s", i, audit.RuleCredential)
	}
}

// renderBumpedAccess writes the refusals inside a bumped tunnel, before
// any rule that could admit: no tunnel in the tunnel, no TRACE or TRACK
// (they would echo the key the gate sets), no request for another host.
func renderBumpedAccess(line func(string, ...any), creds []Credential) {
	if len(creds) == 0 {
		return
	}
	line("http_access deny gate_bumped gate_bumped_methods gate_rule_%s", audit.RuleBumpedMethod)
	line("http_access deny gate_bumped !gate_bumped_own gate_rule_%s", audit.RuleBumpedHost)
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
	line("ssl_bump terminate gate_ip_literal gate_rule_%s", audit.RuleSNIMismatch)
	line("ssl_bump terminate !gate_sni_present gate_rule_%s", audit.RuleNoSNI)
	for i := range CredentialHosts(creds) {
		line("ssl_bump bump gate_cred_target_%d gate_cred_sni_%d gate_sni_present gate_bump_mark_%d gate_rule_%s", i, i, i, audit.RuleBumped)
	}
	for i := range names {
		line("ssl_bump splice gate_target_%d gate_sni_%d gate_sni_present", i, i)
	}
	// A ClientHello naming exactly the tunnel's target: also a name allowed
	// live, which no line above lists.
	line("ssl_bump splice gate_sni_is_target gate_sni_present")
	line("ssl_bump terminate all gate_rule_%s", audit.RuleSNIMismatch)
	line("on_unsupported_protocol respond all gate_rule_%s", audit.RuleNotTLS)
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
	line("tls_outgoing_options cafile=%s/%s default-ca=%s min-version=1.2", dir, UpstreamCAFile, ca)
	line("sslcrtd_program /usr/lib/squid/security_file_certgen -s %s/%s -M 4MB", dir, CertDBDir)
	line("sslcrtd_children 2 startup=1 idle=1")
	line("")
	line("# Credentials: whatever the sandbox sent in the header is dropped; the")
	line("# real value is added to HTTPS requests to the credential host only.")
	hosts := CredentialHosts(creds)
	for i, c := range creds {
		hi := indexOf(hosts, c.Host.String())
		line("request_header_access %s deny gate_cred_target_%d", c.Header, hi)
		line("request_header_add %s %s gate_cred_target_%d gate_bumped_for_%d gate_cred_note_%d", c.Header, squidQuote(c.Value), hi, hi, i)
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
