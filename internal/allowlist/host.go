// Package allowlist parses allowlist entries once into typed hosts: the one validator every host passes.
package allowlist

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/aisb-dev/aisb/contract"
)

// Sentinel errors, one per kind of refusal, so callers and tests can tell them
// apart with errors.Is. The message a user sees comes from *EntryError.
var (
	ErrEmpty     = errors.New("empty entry")
	ErrScheme    = errors.New("scheme")
	ErrPort      = errors.New("port")
	ErrPath      = errors.New("path or query")
	ErrWildcard  = errors.New("wildcard")
	ErrUppercase = errors.New("uppercase")
	ErrNonASCII  = errors.New("non-ASCII")
	ErrSpace     = errors.New("whitespace or control character")
	ErrIPv6      = errors.New("IPv6 literal")
	ErrIPv4Form  = errors.New("non-canonical IPv4 form")
	ErrSyntax    = errors.New("invalid host name")
	ErrDuplicate = errors.New("duplicate entry")
	ErrCovered   = errors.New("entry covered by a domain entry")
)

// EntryError says why one allowlist entry was refused and how to write it instead.
type EntryError struct {
	Entry   string // the entry as written
	Index   int    // its position in the list, or -1 for a single entry
	Problem string // what is wrong, lower-case
	Fix     string // what to write instead; may be empty
	Kind    error  // one of the sentinel errors above
}

func (e *EntryError) Error() string {
	msg := fmt.Sprintf("%q: %s", e.Entry, e.Problem)
	if e.Fix != "" {
		msg += "; " + e.Fix
	}
	return msg
}

func (e *EntryError) Unwrap() error { return e.Kind }

// Host is one validated allowlist entry. Exactly one of Name, Addr and Net is set.
type Host struct {
	Name   string       // lower-case host name without the leading dot
	Domain bool         // written with a leading dot: the name and all its subdomains
	Addr   netip.Addr   // a literally permitted IPv4 address
	Net    netip.Prefix // a literally permitted IPv4 network (no-gate mode's CIDR entries)
}

// String renders the entry exactly as it was written (and accepted).
func (h Host) String() string {
	if h.Addr.IsValid() {
		return h.Addr.String()
	}
	if h.Net.IsValid() {
		return h.Net.String()
	}
	if h.Domain {
		return "." + h.Name
	}
	return h.Name
}

// IsAddr reports whether the entry is an IPv4 address rather than a name.
func (h Host) IsAddr() bool { return h.Addr.IsValid() }

// IsNet reports whether the entry is an IPv4 network.
func (h Host) IsNet() bool { return h.Net.IsValid() }

// Covers reports whether h admits every request that other admits.
func (h Host) Covers(other Host) bool {
	switch {
	case h.IsNet() && other.IsAddr():
		return h.Net.Contains(other.Addr)
	case h.IsNet() && other.IsNet():
		return h.Net.Bits() <= other.Net.Bits() && h.Net.Contains(other.Net.Addr())
	case h.IsAddr() || other.IsAddr() || h.IsNet() || other.IsNet():
		return h == other
	}
	if !h.Domain {
		return !other.Domain && h.Name == other.Name
	}
	return other.Name == h.Name || strings.HasSuffix(other.Name, "."+h.Name)
}

// ParseHost validates a single allowlist entry.
func ParseHost(s string) (Host, error) {
	h, err := parseHost(s)
	if err != nil {
		err.Entry, err.Index = s, -1
		return Host{}, err
	}
	return h, nil
}

func refuse(kind error, problem, fix string) *EntryError {
	return &EntryError{Problem: problem, Fix: fix, Kind: kind}
}

// parseHost runs the checks in a fixed order, so that each bad form gets the
// most specific message: the shape of a URL first, then characters, then IP
// forms, then the host-name grammar.
func parseHost(s string) (Host, *EntryError) {
	if strings.TrimSpace(s) == "" {
		return Host{}, refuse(ErrEmpty, "empty entry", "remove it or write a host name such as \"example.com\"")
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError {
			return Host{}, refuse(ErrSpace, "contains whitespace or a control character", "write the bare host name, such as \"example.com\"")
		}
	}
	if i := strings.Index(s, "://"); i >= 0 {
		return Host{}, refuse(ErrScheme, "a scheme is not allowed", fmt.Sprintf("write the host name alone, such as %q", hostPart(s[i+3:])))
	}
	if strings.ContainsAny(s, "*") {
		return Host{}, refuse(ErrWildcard, "wildcards are not allowed", fmt.Sprintf("write %q for the domain and all its subdomains", "."+strings.TrimLeft(s, "*.")))
	}
	if strings.Contains(s, "[") || strings.Count(s, ":") >= 2 {
		return Host{}, refuse(ErrIPv6, "IPv6 literals are not allowed", "the sandbox has no IPv6; list the host name instead")
	}
	if cidrShape.MatchString(s) {
		return parseNet(s)
	}
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		return Host{}, refuse(ErrPath, "a path or query is not allowed", fmt.Sprintf("write the host name alone, such as %q; the gate admits whole hosts", hostPart(s)))
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return Host{}, refuse(ErrPort, "a port is not allowed", fmt.Sprintf("write %q; HTTPS is admitted on 443 and plain HTTP on 80 and 443", s[:i]))
	}
	for _, r := range s {
		if r > unicode.MaxASCII {
			fix := "write the punycode (xn--) form"
			if a, err := idna.Lookup.ToASCII(strings.ToLower(s)); err == nil {
				fix = fmt.Sprintf("write the punycode form %q", a)
			}
			return Host{}, refuse(ErrNonASCII, "non-ASCII characters are not allowed", fix)
		}
	}
	if lower := strings.ToLower(s); lower != s {
		return Host{}, refuse(ErrUppercase, "uppercase letters are not allowed", fmt.Sprintf("write %q", lower))
	}
	if s == "." || s == ".." {
		return Host{}, refuse(ErrSyntax, "a lone dot is not a host", "write \".example.com\" for a domain and all its subdomains")
	}
	if h, err, ok := parseIPv4(s); ok {
		return h, err
	}
	return parseName(s)
}

var cidrShape = regexp.MustCompile(`^[0-9]+(\.[0-9]+){3}/[0-9]+$`)

// parseNet reads an IPv4 network in CIDR form; it must be written masked,
// no wider than /8, and not as a single address.
func parseNet(s string) (Host, *EntryError) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return Host{}, refuse(ErrIPv4Form, "not an IPv4 network", "write a network such as \"192.0.2.0/24\" (four decimal numbers without leading zeros, then /8 to /31)")
	}
	switch {
	case p.Bits() == 32:
		return Host{}, refuse(ErrIPv4Form, "a /32 network is one address", fmt.Sprintf("write %q", p.Addr()))
	case p.Bits() < contract.MinNetBits:
		return Host{}, refuse(ErrIPv4Form, fmt.Sprintf("a /%d network is wider than /%d", p.Bits(), contract.MinNetBits), "list the hosts or narrower networks you mean")
	case p.Masked() != p:
		return Host{}, refuse(ErrIPv4Form, "host bits are set in the network", fmt.Sprintf("write %q", p.Masked()))
	}
	return Host{Net: p}, nil
}

// hostPart cuts a URL-ish string down to its host, for the fix in a message.
func hostPart(s string) string {
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		s = s[i+1:]
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	return strings.ToLower(s)
}

// parseIPv4 recognises everything that looks like an IPv4 address. ok is false
// when s is not number-like at all and should be read as a name. Only the
// canonical dotted quad is accepted: squid and C resolvers read 0x7f.1,
// 2130706433, 0177.0.0.1 and 127.1 as addresses, so they must never pass as names.
func parseIPv4(s string) (h Host, err *EntryError, ok bool) {
	trimmed := strings.TrimPrefix(s, ".")
	labels := strings.Split(strings.TrimSuffix(trimmed, "."), ".")
	numeric := true
	for _, l := range labels {
		if !isNumberLike(l) {
			numeric = false
		}
	}
	// A name whose last label is number-like is an address to a resolver
	// (RFC 3696 §2: top-level labels are never all-numeric).
	if !numeric && !isNumberLike(labels[len(labels)-1]) {
		return Host{}, nil, false
	}
	if !numeric {
		return Host{}, refuse(ErrSyntax, "the last label is numeric, so resolvers read it as an address", "write a host name whose top-level label has letters, or a dotted-quad IPv4 address"), true
	}
	if trimmed != s {
		return Host{}, refuse(ErrIPv4Form, "a leading dot does not apply to an address", fmt.Sprintf("write %q", trimmed)), true
	}
	if a, perr := netip.ParseAddr(s); perr == nil && a.Is4() && a.String() == s {
		return Host{Addr: a}, nil, true
	}
	fix := "write the address as four decimal numbers 0-255 without leading zeros, such as \"192.0.2.10\""
	if a, ok := canonicalIPv4(s); ok {
		fix = fmt.Sprintf("write %q", a)
	}
	return Host{}, refuse(ErrIPv4Form, "integer, hex, octal and short IPv4 forms are not allowed", fix), true
}

func isNumberLike(l string) bool {
	if l == "" {
		return false
	}
	if strings.HasPrefix(l, "0x") || strings.HasPrefix(l, "0X") {
		l = l[2:]
		if l == "" {
			return true
		}
		for _, c := range l {
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
		return true
	}
	for _, c := range l {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// canonicalIPv4 reads s the way inet_aton does (1 to 4 parts, each decimal,
// 0x-hex or 0-octal, the last part filling the remaining bytes).
func canonicalIPv4(s string) (string, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return "", false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 0, 32)
		if err != nil {
			return "", false
		}
		vals[i] = v
	}
	var n uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 255 {
			return "", false
		}
		n |= v << (24 - 8*uint(i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*uint(5-len(vals))) {
		return "", false
	}
	n |= last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}).String(), true
}

// parseName checks the RFC 1123 host-name grammar.
func parseName(s string) (Host, *EntryError) {
	domain := strings.HasPrefix(s, ".")
	name := strings.TrimPrefix(s, ".")
	if strings.HasSuffix(name, ".") {
		return Host{}, refuse(ErrSyntax, "a trailing dot is not allowed", fmt.Sprintf("write %q", strings.TrimRight(s, ".")))
	}
	if strings.HasPrefix(name, ".") {
		return Host{}, refuse(ErrSyntax, "only one leading dot is allowed", fmt.Sprintf("write %q", "."+strings.TrimLeft(s, ".")))
	}
	if len(name) > 253 {
		return Host{}, refuse(ErrSyntax, fmt.Sprintf("the name is %d characters long, more than 253", len(name)), "")
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return Host{}, refuse(ErrSyntax, fmt.Sprintf("%q is not allowed in a host name", c), "use only a-z, 0-9, hyphens and dots")
		}
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return Host{}, refuse(ErrSyntax, "a host name needs at least two labels", fmt.Sprintf("write the full name, such as %q", name+".example"))
	}
	for _, l := range labels {
		switch {
		case l == "":
			return Host{}, refuse(ErrSyntax, "empty label (two dots in a row)", "")
		case len(l) > 63:
			return Host{}, refuse(ErrSyntax, fmt.Sprintf("label %q is longer than 63 characters", l), "")
		case l[0] == '-' || l[len(l)-1] == '-':
			return Host{}, refuse(ErrSyntax, fmt.Sprintf("label %q starts or ends with a hyphen", l), "")
		}
	}
	return Host{Name: name, Domain: domain}, nil
}

// Parse validates a whole list. It returns the accepted entries and one
// error per refused entry (with Index set); duplicates and entries covered by a
// leading-dot entry are refused too, because squid fails to start on them.
func Parse(entries []string) ([]Host, []*EntryError) {
	var hosts []Host
	var idx []int
	var errs []*EntryError
	for i, s := range entries {
		h, err := parseHost(s)
		if err != nil {
			err.Entry, err.Index = s, i
			errs = append(errs, err)
			continue
		}
		hosts = append(hosts, h)
		idx = append(idx, i)
	}
	var out []Host
	for i, h := range hosts {
		if refused := overlap(hosts, idx, i); refused != nil {
			refused.Entry, refused.Index = entries[idx[i]], idx[i]
			errs = append(errs, refused)
			continue
		}
		out = append(out, h)
	}
	sortErrors(errs)
	return out, errs
}

// overlap says why hosts[i] may not stand beside the others: a duplicate of
// an earlier entry, or covered by another. idx are the entries' positions.
func overlap(hosts []Host, idx []int, i int) *EntryError {
	h := hosts[i]
	for j, o := range hosts {
		switch {
		case i == j:
		case o == h && j < i:
			return &EntryError{Problem: fmt.Sprintf("duplicate of entry %d", idx[j]), Fix: "remove it", Kind: ErrDuplicate}
		case o != h && o.Covers(h):
			return &EntryError{Problem: fmt.Sprintf("already covered by %q (entry %d)", o.String(), idx[j]), Fix: "remove it", Kind: ErrCovered}
		}
	}
	return nil
}

// Covered reports whether some entry of list admits everything h admits.
func Covered(list []Host, h Host) bool {
	return slices.ContainsFunc(list, func(x Host) bool { return x.Covers(h) })
}

// Add returns list with h added, unless an entry already covers it; entries
// that h covers are replaced by it, so the list never holds an overlap.
func Add(list []Host, h Host) []Host {
	if Covered(list, h) {
		return list
	}
	out := make([]Host, 0, len(list)+1)
	for _, x := range list {
		if !h.Covers(x) {
			out = append(out, x)
		}
	}
	return append(out, h)
}

// Narrow keeps the entries of proposed that current covers (a project file
// may take reach away, never add it) and returns the others as dropped.
func Narrow(current, proposed []Host) (kept, dropped []Host) {
	for _, h := range proposed {
		if Covered(current, h) {
			kept = append(kept, h)
		} else {
			dropped = append(dropped, h)
		}
	}
	return kept, dropped
}

func sortErrors(errs []*EntryError) {
	for i := 1; i < len(errs); i++ {
		for j := i; j > 0 && errs[j].Index < errs[j-1].Index; j-- {
			errs[j], errs[j-1] = errs[j-1], errs[j]
		}
	}
}
