// Package squidconf renders the gate's squid.conf from typed inputs: pure, no files, no Podman.
package squidconf

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/netaddr"
)

// Config is everything squid.conf is rendered from. Every host in Allowlist
// came from allowlist.Parse; nothing else reaches the file.
type Config struct {
	Session   string           // session id, [a-z0-9-] only; written into every log line
	Port      int              // the front: listens on 127.0.0.1:Port, the sandbox's one way out
	TLSPort   int              // the TLS port on 127.0.0.1, reached from the front only (see handover.go)
	Dir       string           // the session directory as squid sees it
	Allowlist []allowlist.Host // validated entries
	SSHHosts  []allowlist.Host // validated names CONNECT may reach on port 22
	DNS       []netip.Addr     // resolvers instead of the host's; empty: the host's
	Host      netaddr.Host     // the host's own addresses, refused like internal ones
	Helper    *Helper          // asks the session's aisb about unlisted names; nil: none
	// Credentials are set by the gate on HTTPS requests to their hosts,
	// which it bumps with the session CA; none: nothing is ever decrypted.
	Credentials []Credential
	// DefaultCA adds squid's own trust store for bumped upstreams (used when
	// the host's store was not found).
	DefaultCA bool
	// Tokens prove the session's sandbox, and the front's hand-over, to
	// the gate (auth.go).
	Tokens Tokens
	// Stream writes the access log to squid's stdout and its cache log to
	// its stderr, which an engine that is not local hands aisb through the
	// API (its logs); else both are files in Dir.
	Stream bool
}

// accessLog is where squid writes the access log, and cacheLog its own.
func (c Config) accessLog() string {
	if c.Stream {
		return "stdio:/dev/stdout"
	}
	return "stdio:" + c.Dir + "/access.log"
}

func (c Config) cacheLog() string {
	if c.Stream {
		return "/dev/stderr"
	}
	return c.Dir + "/cache.log"
}

// Helper is the external ACL helper a session gate consults for names its
// list does not hold (allowed live with aisb allow, or asked in ask mode).
type Helper struct {
	Program string // absolute path in the gate container
	Socket  string // the session's helper socket, as the gate sees it
}

// The names of the helper and of the session's helper socket in the
// directory the gate mounts for them.
const (
	HelperProgram = "aisb-gatehelper"
	HelperSocket  = "helper.sock"
)

var sessionRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidSession reports whether id may name a gate's session (a session id
// or a long-lived gate's name): Render refuses any other.
func ValidSession(id string) bool { return sessionRE.MatchString(id) }

// Render writes squid.conf. The order of the http_access lines is the
// security property: every refusal that needs no DNS comes first, and the
// only ACL that resolves (gate_internal, a dst ACL) is reached only for
// requests already known to be allowed, so a refused name is never resolved.
// Some 170 lines, kept whole on purpose: the file reads top to bottom as
// squid will, and the order of its lines is what is reviewed; the TLS, SSH,
// credential and hand-over parts are rendered by their own files.
func Render(c Config) (string, error) {
	if !sessionRE.MatchString(c.Session) {
		return "", fmt.Errorf("render gate config: session id %q: want [a-z0-9-]", c.Session)
	}
	if err := checkPorts(c); err != nil {
		return "", err
	}
	if c.Dir == "" || strings.ContainsAny(c.Dir, " \t\r\n\"#") || !strings.HasPrefix(c.Dir, "/") {
		return "", fmt.Errorf("render gate config: directory %q must be absolute with no spaces or quotes", c.Dir)
	}
	if h := c.Helper; h != nil {
		for _, p := range []string{h.Program, h.Socket} {
			if p == "" || strings.ContainsAny(p, " \t\r\n\"#%") || !strings.HasPrefix(p, "/") {
				return "", fmt.Errorf("render gate config: helper path %q must be absolute with no spaces, quotes or %%", p)
			}
		}
	}
	if err := CheckCredentials(c.Credentials); err != nil {
		return "", fmt.Errorf("render gate config: %w", err)
	}
	if err := c.Tokens.check(); err != nil {
		return "", fmt.Errorf("render gate config: %w", err)
	}
	var names, addrs []string
	for _, h := range c.Allowlist {
		// Not a second parse for meaning: a guard where a host becomes
		// squid.conf text. Host's fields are open, and a hand-built one with
		// a newline would inject a directive; only what the parser yields
		// again, unchanged, is written.
		if again, err := allowlist.ParseHost(h.String()); err != nil || again != h {
			return "", fmt.Errorf("render gate config: allowlist entry %q did not come from the parser", h.String())
		}
		if h.IsAddr() || h.IsNet() {
			addrs = append(addrs, h.String())
		} else {
			names = append(names, h.String())
		}
	}
	sshNames, err := sshNames(c.SSHHosts)
	if err != nil {
		return "", err
	}
	var dns []string
	for _, a := range c.DNS {
		dns = append(dns, a.WithZone("").String())
	}

	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# aisb gate for session %s: generated for this session only; do not edit.", c.Session)
	line("")
	line("# Listen on the host's loopback only; the sandbox reaches the front port")
	line("# through its network helper's mapped host address.")
	renderPorts(line, c, len(c.Credentials) > 0)
	line("pid_filename %s/squid.pid", c.Dir)
	line("# What squid and its helpers write (logs, generated keys) is the gate's alone.")
	line("umask 077")
	line("cache_log %s", c.cacheLog())
	line("")
	line("# A gate, not a cache: nothing stored, no side services.")
	line("cache deny all")
	line("cache_mem 0 MB")
	line("icp_port 0")
	line("htcp_port 0")
	line("pinger_enable off")
	line("client_db off")
	line("netdb_filename none")
	// Icons (for FTP listings) and a cache digest are loaded or built at
	// start, ~15 ms of it on the test host, and a gate serves neither.
	line("mime_table /dev/null")
	line("digest_generation off")
	line("logfile_rotate 0")
	line("shutdown_lifetime 1 seconds")
	line("via off")
	line("forwarded_for delete")
	line("httpd_suppress_version_string on")
	if len(dns) > 0 {
		line("dns_nameservers %s", strings.Join(dns, " "))
	}
	line("")
	line("# Every line of the access log: version, time, session, client, method,")
	line("# the host and port squid used (not the Host header), status, bytes sent")
	line("# to the client, squid's result and hierarchy, what the TLS step did, the")
	line("# credential set (its name, never its value), and the rule that decided.")
	line("logformat gate_audit %s %%ts.%%03tu %s %%>a %%rm %%>rd %%>rP %%>Hs %%<st %%Ss:%%Sh %%ssl::bump_mode %%{cred}note %%{rule}note", audit.LogVersion, c.Session)
	line("buffered_logs off")
	line("")
	line("# ACLs that never resolve anything.")
	line("acl gate_clients src 127.0.0.1/32 %s/32 ::1", audit.SelfAddr)
	line("acl gate_connect method CONNECT")
	line("acl gate_connect_ports port 443 %d", audit.SSHPort)
	line("acl gate_web_ports port 80 443")
	line("acl gate_http proto HTTP")
	line("acl gate_at_front myportname %s", frontPortName)
	renderAuthACLs(line, c.Tokens)
	line("# A tunnel the front handed to the TLS port: it carries the peer's token.")
	line("acl gate_handed all-of gate_connect gate_peer !gate_at_front")
	line(`acl gate_ip_literal dstdom_regex -n ^[0-9.]+$ : [[]`)
	if len(addrs) > 0 {
		line("acl gate_listed_addrs dst -n %s", strings.Join(addrs, " "))
	}
	if len(names) > 0 {
		line("acl gate_listed_names dstdomain -n %s", strings.Join(names, " "))
	}
	for _, l := range sshACLs(sshNames) {
		line("%s", l)
	}
	line("# The one ACL that resolves: reached only for allowed requests.")
	line("%s", InternalACL(c.Host))
	live := ""
	if h := c.Helper; h != nil {
		line("# Names the lists above do not hold are asked of the session's aisb (aisb")
		line("# allow, ask mode). Only the refusal lines for unlisted names reach it: a")
		line("# listed name never waits on it. ttl=0: no answer is reused. squid")
		line("# starts it on the first question (children-startup=0), not at its start.")
		// children-startup=0: squid forks each helper it starts and the
		// child closes every descriptor up to squid's compile-time limit
		// (65536 in Debian's build) before it execs the helper: 65,533
		// close calls, ~230 ms of CPU on a 2-core Firecracker VM, taken
		// from the sandbox's start and squid's own. Only names outside
		// the lists reach this helper, so the first such question pays
		// that instead (it then waits on the user or a refusal anyway).
		line("external_acl_type gate_live_helper ttl=0 negative_ttl=0 grace=0 children-startup=0 children-max=1 concurrency=1000 %%DST %s %s", h.Program, h.Socket)
		line("acl gate_live external gate_live_helper")
		// A tunnel the front handed to the TLS port was asked about there
		// already: asking again could put one question to the user twice.
		live = " !gate_handed !gate_live"
	}
	renderTLSACLs(line, c.Dir, names, c.Credentials)
	line("")
	line("# Tags: always match, so each is put last on its line and records the rule.")
	for _, r := range []string{audit.RuleClient, audit.RuleManager, audit.RuleConnectPort, audit.RuleScheme, audit.RulePort, audit.RuleIPLiteral, audit.RuleSSHNotListed, audit.RuleNotListed, audit.RuleInternal, audit.RuleAllowed, audit.RuleNotSandbox} {
		line("acl gate_rule_%s annotate_transaction rule=%s", r, r)
	}
	line("")
	line("http_access deny !gate_clients gate_rule_%s", audit.RuleClient)
	renderAuthAccess(line, len(c.Credentials) > 0)
	renderBumpedAccess(line, c.Credentials)
	line("http_access deny manager gate_rule_%s", audit.RuleManager)
	line("http_access deny gate_connect !gate_connect_ports gate_rule_%s", audit.RuleConnectPort)
	if len(c.Credentials) > 0 {
		// Requests decrypted from a credential host's tunnel are https.
		line("http_access deny !gate_connect !gate_http !gate_bumped gate_rule_%s", audit.RuleScheme)
	} else {
		line("http_access deny !gate_connect !gate_http gate_rule_%s", audit.RuleScheme)
	}
	line("http_access deny !gate_connect !gate_web_ports gate_rule_%s", audit.RulePort)
	listedAddr := ""
	if len(addrs) > 0 {
		listedAddr = " !gate_listed_addrs"
	}
	line("http_access deny gate_ip_literal%s%s gate_rule_%s", listedAddr, live, audit.RuleIPLiteral)
	line("%s", sshAccess(sshNames))
	// A CONNECT to port 22 that got here is for a listed SSH name.
	sshListed := ""
	if len(sshNames) > 0 {
		sshListed = " !gate_ssh_port"
	}
	if len(names) > 0 {
		line("http_access deny !gate_listed_names%s%s%s gate_rule_%s", listedAddr, sshListed, live, audit.RuleNotListed)
	} else if len(addrs) > 0 {
		line("http_access deny !gate_listed_addrs%s%s gate_rule_%s", sshListed, live, audit.RuleNotListed)
	} else {
		line("http_access deny%s%s gate_rule_%s", sshListed, live, audit.RuleNotListed)
	}
	line("http_access deny gate_internal gate_rule_%s", audit.RuleInternal)
	renderCredentialAccess(line, c.Credentials)
	line("http_access allow gate_rule_%s", audit.RuleAllowed)
	line("http_access deny all")
	renderTLSRules(line, c.Dir, names, c.Credentials, c.DefaultCA)
	renderHandover(line, c)
	return b.String(), nil
}

// InternalACL is the one line of squid.conf that follows the host: every
// internal range, and the host's on-link prefixes and addresses.
func InternalACL(h netaddr.Host) string {
	return "acl gate_internal dst " + strings.Join(h.Refused(), " ")
}
