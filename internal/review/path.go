package review

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aisb-dev/aisb/internal/termsafe"
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

// Quote is a name the agent chose (a path, a symlink target) as it may be
// printed: as it is when termsafe calls it plain and it holds no space,
// else quoted by termsafe. A name can hold escape sequences, newlines,
// bidirectional overrides or anything but '/' and NUL; and a name with
// spaces could pose as the listing's own words ("a.txt  (mode 0644)").
func Quote(s string) string {
	if s != "" && termsafe.Plain(s) && !strings.ContainsRune(s, ' ') {
		return s
	}
	return termsafe.Quote(s)
}

// Printable is one line of the agent's text as it may be printed: every
// byte outside printable ASCII and tab becomes \xNN (termsafe.Content).
func Printable(s string) string {
	shown, _ := termsafe.Content([]byte(s))
	return strings.ReplaceAll(shown, "\n", `\x0a`)
}
