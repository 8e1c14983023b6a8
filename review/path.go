package review

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrUnsafePath is a path that would leave the project or is not a plain
// relative path (absolute, "..", empty or "." components, NUL).
var ErrUnsafePath = errors.New("unsafe path")

// checkRel accepts only clean relative paths inside the project.
func checkRel(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%w: %s", ErrUnsafePath, Quote(p))
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("%w: %s", ErrUnsafePath, Quote(p))
		}
	}
	return nil
}

// Quote returns s as is when it is printable ASCII without quotes or
// backslashes, else Go-quoted in ASCII: a name the agent chose can hold
// escape sequences, newlines or anything but '/' and NUL.
func Quote(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return strconv.QuoteToASCII(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

// Printable reduces one line of the agent's text to printable ASCII: tabs
// stay, every other byte outside 0x20-0x7e becomes \xNN.
func Printable(s string) string {
	ok := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c > 0x7e {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 0x20 && c != '\t') || c > 0x7e {
			fmt.Fprintf(&b, `\x%02x`, c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
