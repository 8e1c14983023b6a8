package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aisb-dev/aisb/allowlist"
	"github.com/aisb-dev/aisb/internal/tail"
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

// ParseLine reads one access-log line written with the gate's logformat:
//
//	aisb1 TIME SESSION CLIENT METHOD HOST PORT STATUS BYTES RULE
//
// HOST is squid's view of the destination and may, for a crafted request,
// contain spaces: it is everything between METHOD and the last four fields.
func ParseLine(line string) (Event, error) {
	f := strings.Fields(line)
	if len(f) < 10 || f[0] != LogVersion {
		return Event{}, fmt.Errorf("not a gate access-log line: %.80q", line)
	}
	secs, err := strconv.ParseFloat(f[1], 64)
	if err != nil || secs < 0 || secs > 1e11 {
		return Event{}, fmt.Errorf("not a gate access-log line: time %.40q", f[1])
	}
	n := len(f)
	e := Event{
		Time:    time.UnixMilli(int64(secs * 1000)).UTC(),
		Session: f[2],
		Client:  f[3],
		Method:  f[4],
		Host:    strings.Join(f[5:n-4], " "),
		Rule:    f[n-1],
	}
	// Whatever a client managed to put into a field reaches the user's
	// terminal through aisb audit: keep printable ASCII only.
	e.Host, e.Method, e.Session, e.Client, e.Rule = printable(e.Host), printable(e.Method), printable(e.Session), printable(e.Client), printable(e.Rule)
	e.Port, _ = strconv.Atoi(f[n-4])   // "-" when squid had no port
	e.Status, _ = strconv.Atoi(f[n-3]) // "-" or 0 when no reply was sent
	e.Bytes, _ = strconv.ParseInt(f[n-2], 10, 64)
	if e.Rule == "-" || e.Rule == "" {
		e.Rule = RuleUntagged
	}
	e.Event = EventBlocked
	if e.Rule == RuleAllowed {
		e.Event = EventAllowed
	}
	return e, nil
}

// Follow converts the access log at path into JSON audit lines on out as
// squid writes them, until ctx ends; then it converts what remains and
// returns. A missing log is waited for.
func Follow(ctx context.Context, path, session string, out io.Writer) error {
	enc := json.NewEncoder(out)
	// squid can write its directory: the log is opened without following a
	// link, must be a regular file, and what is converted is freed.
	return tail.FollowAndFree(ctx, path, func(line []byte) error {
		if err := enc.Encode(eventFor(string(line), session)); err != nil {
			return fmt.Errorf("write audit: %w", err)
		}
		return nil
	})
}

// eventFor never drops a line: one the parser cannot read is a blocked event.
func eventFor(line, session string) Event {
	e, err := ParseLine(line)
	if err != nil {
		return Event{Time: time.Now().UTC(), Session: session, Event: EventBlocked, Rule: RuleMalformed, Host: "-"}
	}
	return e
}

// Advice says how to allow what an event blocked, or why no allowlist entry can.
func Advice(e Event) string {
	switch e.Rule {
	case RuleAllowed:
		return ""
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
