// Package termsafe reduces text that came from a file or from traffic to
// something that cannot drive the user's terminal.
package termsafe

import (
	"fmt"
	"strconv"
	"strings"
)

// Printable replaces every byte outside printable ASCII with '?'.
func Printable(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// Lines is Printable for text of several lines: newlines stay.
func Lines(s string) string {
	parts := strings.Split(s, "\n")
	for i, p := range parts {
		parts[i] = Printable(p)
	}
	return strings.Join(parts, "\n")
}

// Quote is s in double quotes with everything outside printable ASCII
// escaped, as Go writes it.
func Quote(s string) string { return strconv.QuoteToASCII(s) }

// Plain reports whether s is printable ASCII without quotes or backslashes,
// safe to print as it is.
func Plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// Name is s as it is when Plain, else quoted: for paths and keys.
func Name(s string) string {
	if Plain(s) {
		return s
	}
	return Quote(s)
}

// Content shows a file's bytes exactly and printably: printable ASCII, tabs
// and newlines as they are, every other byte as \xHH. It also reports how
// many bytes were escaped, so the reader knows a \x in the output may not be
// the file's own.
func Content(b []byte) (shown string, escaped int) {
	var sb strings.Builder
	for _, c := range b {
		switch {
		case c == '\n' || c == '\t' || (c >= 0x20 && c <= 0x7e):
			sb.WriteByte(c)
		default:
			fmt.Fprintf(&sb, `\x%02x`, c)
			escaped++
		}
	}
	return sb.String(), escaped
}
