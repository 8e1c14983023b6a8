// Package knownhosts picks, from the user's own known_hosts, the lines that
// pin the host keys of the hosts SSH may reach, so the sandbox checks them as
// ssh does on the host and learns nothing about the user's other hosts.
package knownhosts

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

// Result is what Filter kept.
type Result struct {
	Lines   []string         // the matching lines in file order, plain ones reduced (see reduce)
	Missing []allowlist.Host // listed hosts no line pins
}

// Bytes is the kept lines as a known_hosts file.
func (r Result) Bytes() []byte {
	if len(r.Lines) == 0 {
		return nil
	}
	return []byte(strings.Join(r.Lines, "\n") + "\n")
}

// Filter reads a known_hosts file and keeps each line whose host patterns
// name a listed host on port 22: plain names, "[name]:22", wildcard
// patterns that match the name, negations honoured, hashed "|1|" entries
// (HMAC-SHA1 of the name under the line's salt), and @cert-authority and
// @revoked lines alike. A domain entry (".example.com") also keeps plain and
// "*."-wildcard patterns for its subdomains; hashed lines can only be matched
// for the domain's own name. Lines it cannot read are skipped.
func Filter(r io.Reader, hosts []allowlist.Host) (Result, error) {
	var res Result
	found := make([]bool, len(hosts))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		patterns, ok := hostField(line)
		if !ok {
			continue
		}
		keep := false
		for i, h := range hosts {
			if h.IsAddr() || h.IsNet() {
				continue
			}
			if lineNames(patterns, h) {
				found[i], keep = true, true
			}
		}
		if keep {
			res.Lines = append(res.Lines, reduce(line, hosts))
		}
	}
	if err := sc.Err(); err != nil {
		return Result{}, fmt.Errorf("read known_hosts: %w", err)
	}
	for i, h := range hosts {
		if !found[i] {
			res.Missing = append(res.Missing, h)
		}
	}
	return res, nil
}

// hostField returns the host patterns of a key line: the first field, or the
// second after a @marker; a key line has a key type and a key after them.
func hostField(line string) (string, bool) {
	f := strings.Fields(line)
	if len(f) == 0 || strings.HasPrefix(f[0], "#") {
		return "", false
	}
	if strings.HasPrefix(f[0], "@") {
		if f[0] != "@cert-authority" && f[0] != "@revoked" {
			return "", false
		}
		f = f[1:]
	}
	if len(f) < 3 {
		return "", false
	}
	return f[0], true
}

// reduce keeps of a plain (not hashed) line the patterns that name a listed
// host, the negations that could exclude one, the marker, key type and key;
// the other patterns and the comment would tell the sandbox about the user's
// other hosts. A hashed line names one host and is kept as written.
func reduce(line string, hosts []allowlist.Host) string {
	f := strings.Fields(line)
	var marker []string
	if strings.HasPrefix(f[0], "@") {
		marker, f = f[:1], f[1:]
	}
	if strings.HasPrefix(f[0], "|1|") {
		return line
	}
	var pos, neg []string
	for _, p := range strings.Split(f[0], ",") {
		if strings.HasPrefix(p, "!") {
			neg = append(neg, p)
		} else if p != "" {
			pos = append(pos, p)
		}
	}
	names := func(patterns string) bool {
		for _, h := range hosts {
			if !h.IsAddr() && !h.IsNet() && lineNames(patterns, h) {
				return true
			}
		}
		return false
	}
	var kept []string
	for _, p := range pos {
		if names(strings.Join(append([]string{p}, neg...), ",")) {
			kept = append(kept, p)
		}
	}
	for _, n := range neg {
		if strings.ContainsAny(n, "*?") || names(n[1:]) {
			kept = append(kept, n)
		}
	}
	out := append(marker, strings.Join(kept, ","), f[1], f[2])
	return strings.Join(out, " ")
}

// candidates are the names ssh looks a host up by on port 22, and the
// explicit-port form some files carry.
func candidates(name string) []string { return []string{name, "[" + name + "]:22"} }

func lineNames(patterns string, h allowlist.Host) bool {
	if strings.HasPrefix(patterns, "|1|") {
		for _, c := range candidates(h.Name) {
			if hashedMatch(patterns, c) {
				return true
			}
		}
		return false
	}
	var pos, neg []string
	for _, p := range strings.Split(strings.ToLower(patterns), ",") {
		if n, ok := strings.CutPrefix(p, "!"); ok {
			neg = append(neg, n)
		} else if p != "" {
			pos = append(pos, p)
		}
	}
	negated := func(c string) bool {
		for _, n := range neg {
			if glob(n, c) {
				return true
			}
		}
		return false
	}
	for _, c := range candidates(h.Name) {
		if negated(c) {
			continue
		}
		for _, p := range pos {
			if glob(p, c) {
				return true
			}
		}
	}
	if !h.Domain {
		return false
	}
	for _, p := range pos {
		name := p
		if inner, ok := strings.CutPrefix(p, "["); ok {
			var port string
			name, port, _ = strings.Cut(inner, "]:")
			if port != "22" {
				continue
			}
		}
		if negated(p) {
			continue
		}
		if rest, ok := strings.CutPrefix(name, "*."); ok {
			name = rest
		}
		if !strings.ContainsAny(name, "*?") && (name == h.Name || strings.HasSuffix(name, "."+h.Name)) {
			return true
		}
	}
	return false
}

// hashedMatch checks a "|1|SALT|HASH" field against name.
func hashedMatch(field, name string) bool {
	parts := strings.Split(field, "|")
	if len(parts) != 4 || parts[1] != "1" {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(parts[2])
	want, err2 := base64.StdEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil || len(salt) != sha1.Size {
		return false
	}
	m := hmac.New(sha1.New, salt)
	m.Write([]byte(name))
	return hmac.Equal(m.Sum(nil), want)
}

// glob is ssh's pattern match: '*' any run, '?' one character. Names are
// compared in lower case, as ssh does.
func glob(pattern, name string) bool {
	// path.Match treats '/' specially and knows classes; neither can occur
	// in a host name once '[' of the port form is escaped.
	p := strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`).Replace(pattern)
	ok, err := path.Match(p, name)
	return err == nil && ok
}
