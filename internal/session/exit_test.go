package session

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/sandbox"
)

// TestReportExit: "could not be enforced" only when the entrypoint said so.
func TestExplainExit(t *testing.T) {
	for _, c := range []struct {
		name string
		exit sandbox.Exit
		want string // "" means nothing is said
	}{
		{"the command's own 77", sandbox.Exit{Code: 77, Status: contract.Status{Outcome: contract.OutcomeEnforced}}, ""},
		{"the command's own 78", sandbox.Exit{Code: 78, Status: contract.Status{Outcome: contract.OutcomeEnforced}}, ""},
		{"table failed", sandbox.Exit{Code: 77, Status: contract.Status{Outcome: contract.OutcomeFailed, Code: 77, Step: "install table"}}, "could not be enforced (install table failed)"},
		{"policy", sandbox.Exit{Code: 78, Status: contract.Status{Outcome: contract.OutcomeFailed, Code: 78, Step: "read policy"}}, "policy was missing or invalid"},
		{"unenforced", sandbox.Exit{Code: 0, Status: contract.Status{Outcome: contract.OutcomeUnenforced, Step: "install table"}}, "WITHOUT its network table"},
		{"no status", sandbox.Exit{Code: 77, StatusErr: errors.New("gone")}, "left no account"},
	} {
		var b bytes.Buffer
		explainExit(c.exit, func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) })
		if c.want == "" && b.Len() > 0 || !strings.Contains(b.String(), c.want) {
			t.Errorf("%s: said %q, want %q", c.name, b.String(), c.want)
		}
		if c.want != "could not be enforced (install table failed)" && strings.Contains(b.String(), "could not be enforced") {
			t.Errorf("%s: said %q", c.name, b.String())
		}
	}
}
