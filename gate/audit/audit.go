// Package audit is the gate's audit trail: its events, the access-log parser and follower, caps and markers.
package audit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

// Audit events.
const (
	EventAllowed      = "network_allowed"
	EventBlocked      = "network_blocked"
	EventPolicyChange = "policy_change" // a running session's allowlist changed (Action allow or deny)
	EventAsk          = "ask"           // a question about a name, and its outcome in Action
)

// RuleUntagged is recorded for a line squid wrote without a rule: a request
// it could not parse, or a client gone during the check. It counts as blocked.
const RuleUntagged = "untagged"

// RuleMalformed is recorded for a log line that is not in the gate's format.
const RuleMalformed = "malformed"

// Event is one audit record: one allow or one block.
type Event struct {
	Time    time.Time `json:"time"`
	Session string    `json:"session"`
	Event   string    `json:"event"`
	Method  string    `json:"method"`
	Host    string    `json:"host"`
	Port    int       `json:"port"`
	Status  int       `json:"status"`
	Rule    string    `json:"rule"`
	Bytes   int64     `json:"bytes"`
	Client  string    `json:"client,omitempty"`
	Action  string    `json:"action,omitempty"` // policy_change and ask events
	By      *Who      `json:"by,omitempty"`     // who changed the policy or answered
	// TLS is what the gate did with a tunnel's TLS: splice (passed through
	// unread), bump (decrypted: a credential host), terminate, peek.
	TLS string `json:"tls,omitempty"`
	// Credential names the credential the gate set on this request (the
	// variable it came from); its value is never logged.
	Credential string `json:"credential,omitempty"`
}

// Who is the process that changed a session's policy, as the kernel named it
// on the control socket.
type Who struct {
	UID int    `json:"uid"`
	PID int    `json:"pid"`
	Via string `json:"via"` // "aisb allow", "aisb deny" or "aisb watch"
}

// Blocked reports whether the event is a refusal of a request.
func (e Event) Blocked() bool { return e.Event == EventBlocked }

// ErrBookkeeping is returned for a line that records no decision: squid logs
// a spliced tunnel twice, once when it hands the connection over (nothing
// sent yet) and once when the tunnel closes, only the second is an event;
// and it logs its own check that the TLS port is up (see IsSelfCheck).
var ErrBookkeeping = errors.New("a bookkeeping line, not a decision")

// logVersion1 is the format before the TLS layer; lines of a long-lived
// gate started by an older aisb are still read.
const logVersion1 = "aisb1"

// allowedRules are the rules that admit.
var allowedRules = map[string]bool{RuleAllowed: true, RuleBumped: true, RuleCredential: true}

// Allowed reports whether rule admits.
func Allowed(rule string) bool { return allowedRules[rule] }

// ParseLine reads one access-log line written with the gate's logformat:
//
//	aisb2 TIME SESSION CLIENT METHOD HOST PORT STATUS BYTES RESULT TLS CRED RULE
//	aisb1 TIME SESSION CLIENT METHOD HOST PORT STATUS BYTES RULE
//
// HOST is squid's view of the destination and may, for a crafted request,
// contain spaces: it is everything between METHOD and the trailing fields.
func ParseLine(line string) (Event, error) {
	f := strings.Fields(line)
	tail := 0
	switch {
	case len(f) >= 13 && f[0] == LogVersion:
		tail = 7
	case len(f) >= 10 && f[0] == logVersion1:
		tail = 4
	default:
		return Event{}, fmt.Errorf("not a gate access-log line: %.80q", line)
	}
	secs, err := strconv.ParseFloat(f[1], 64)
	if err != nil || secs < 0 || secs > 1e11 {
		return Event{}, fmt.Errorf("not a gate access-log line: time %.40q", f[1])
	}
	n := len(f)
	t := f[n-tail:] // PORT STATUS BYTES [RESULT TLS CRED] RULE
	e := Event{
		Time:    time.UnixMilli(int64(secs * 1000)).UTC(),
		Session: f[2],
		Client:  f[3],
		Method:  f[4],
		Host:    strings.Join(f[5:n-tail], " "),
		Rule:    f[n-1],
	}
	var result string
	if tail == 7 {
		result, e.TLS, e.Credential = printable(t[3]), printable(t[4]), printable(t[5])
		if e.TLS == "-" {
			e.TLS = ""
		}
		if e.Credential == "-" {
			e.Credential = ""
		}
	}
	// Whatever a client managed to put into a field reaches the user's
	// terminal through aisb audit: keep printable ASCII only.
	e.Host, e.Method, e.Session, e.Client, e.Rule = printable(e.Host), printable(e.Method), printable(e.Session), printable(e.Client), printable(e.Rule)
	e.Port, _ = strconv.Atoi(t[0])   // "-" when squid had no port
	e.Status, _ = strconv.Atoi(t[1]) // "-" or 0 when no reply was sent
	e.Bytes, _ = strconv.ParseInt(t[2], 10, 64)
	if e.Rule == "-" || e.Rule == "" {
		e.Rule = RuleUntagged
	}
	if tail == 7 && IsSelfCheck(e) {
		return e, ErrBookkeeping
	}
	if tail == 7 && e.Method == "CONNECT" && e.Port != SSHPort && Allowed(e.Rule) {
		// A tunnel admitted at CONNECT then meets the TLS step (an SSH
		// tunnel does not). Squid logs a tunnel it terminated there as
		// status 200 with 0 bytes: never read that as allowed.
		switch {
		case e.TLS == "splice" && strings.HasPrefix(result, "NONE") && e.Bytes == 0:
			return e, ErrBookkeeping
		case e.TLS != "splice" && e.TLS != "bump":
			e.Rule = RuleTerminated
		}
	}
	if tail == 7 && e.Method != "CONNECT" && e.Port == 443 && e.Rule == RuleUntagged && (e.Status == 502 || e.Status == 503) {
		e.Rule = RuleUpstream
	}
	e.Event = EventBlocked
	if Allowed(e.Rule) {
		e.Event = EventAllowed
	}
	return e, nil
}

// Advice says how to allow what an event blocked, or why no allowlist entry can.
func Advice(e Event) string {
	switch e.Rule {
	case RuleAllowed, RuleBumped, RuleCredential:
		return ""
	case RuleSNIMismatch:
		return fmt.Sprintf("the TLS handshake inside the tunnel to %s named another host (SNI); a tunnel carries only the name it was opened for. To reach that host, allow it and connect to it by name", e.Host)
	case RuleNoSNI:
		return fmt.Sprintf("the TLS handshake inside the tunnel to %s named no host (SNI); the gate passes only handshakes naming the tunnel's host. No allowlist entry lifts this: use a client that sends SNI", e.Host)
	case RuleNotTLS:
		return fmt.Sprintf("the tunnel to %s:%d did not carry TLS; tunnels are for HTTPS only. No allowlist entry lifts this", e.Host, e.Port)
	case RuleTerminated:
		return fmt.Sprintf("the tunnel to %s was closed at its TLS handshake before anything passed (the client left, or the handshake could not be read)", e.Host)
	case RuleUpstream:
		return fmt.Sprintf("the gate could not reach %s or verify its certificate against this host's trust store and network.upstream_ca; the key was not sent (the gate's cache.log says which)", e.Host)
	case RuleWebsocket:
		return fmt.Sprintf("websockets do not pass a credential host's decrypted connection (%s); no allowlist entry lifts this", e.Host)
	case RuleNotListed:
		// The host came from traffic: it is a command only when it is an
		// allowlist entry as it stands, never shell text.
		if h, err := allowlist.ParseHost(e.Host); err == nil && h.String() == e.Host {
			return fmt.Sprintf("to allow it: aisb run --allow %s, or add %q to network.allowed_hosts", e.Host, e.Host)
		}
		return fmt.Sprintf("the requested host %s is not a valid allowlist entry, so no command is suggested", strconv.QuoteToASCII(e.Host))
	case RuleIPLiteral:
		return "the gate admits names, not addresses: use the host name (an address is admitted only when listed exactly)"
	case RuleInternal:
		return fmt.Sprintf("%s resolved to an internal address (loopback, private, link-local, CGNAT or the host's own); no allowlist entry lifts this", e.Host)
	case RuleSSHNotListed:
		return sshAdvice(e.Host)
	case RuleConnectPort:
		return fmt.Sprintf("tunnels go to port 443 (HTTPS) and 22 (SSH, listed hosts) only, not %d; no allowlist entry lifts this", e.Port)
	case RulePort:
		return fmt.Sprintf("plain HTTP goes to ports 80 and 443 only, not %d; no allowlist entry lifts this", e.Port)
	case RuleScheme:
		return "only http:// requests and HTTPS tunnels pass the gate; no allowlist entry lifts this"
	case RuleManager:
		return "the gate's cache manager is never reachable"
	case RuleClient:
		return "the request did not come from the sandbox's side of the gate"
	case RuleNotSandbox:
		return "the request did not come from this session's sandbox (it lacked the sandbox's gate token): another local user or a process outside the sandbox; nothing lifts this"
	case RuleBumpedMethod:
		return fmt.Sprintf("%s is not sent inside the decrypted connection to %s; nothing lifts this", printable(e.Method), e.Host)
	case RuleBumpedHost:
		return fmt.Sprintf("the decrypted connection to a credential host carries requests for that host only, not %s; connect to it by name instead", e.Host)
	default:
		return "the gate could not read or finish this request (malformed, or the client left during the check)"
	}
}

// printable replaces every byte outside printable ASCII with '?'.
func printable(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// sshAdvice says how to let SSH reach host, or why no entry can.
func sshAdvice(host string) string {
	if _, err := allowlist.ParseHost(host); err != nil || strings.Trim(host, "0123456789.") == "" {
		return "SSH through the gate goes to listed names only, never to an address; no entry lifts this"
	}
	return fmt.Sprintf("to allow SSH to it: aisb run --allow-ssh %s, or add %q to network.ssh_hosts", host, host)
}
