package session

import (
	"errors"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/config"
)

// TestCheckAsk: ask mode needs the session's own gate; it is refused, before
// anything starts, with a long-lived gate or without a gate, and never
// stands in the way when asking is off.
func TestCheckAsk(t *testing.T) {
	for _, c := range []struct {
		mode    contract.Mode
		gate    string
		ask     bool
		refused bool
	}{
		{contract.ModeAllow, "", true, false},
		{contract.ModeAllow, "shared", true, true},
		{contract.ModeNoGate, "", true, true},
		{contract.ModeNone, "", true, true},
		{contract.ModeOpen, "", true, true},
		{contract.ModeAllow, "shared", false, false},
		{contract.ModeNoGate, "", false, false},
	} {
		var r config.Resolved
		r.Config.Network.Mode, r.Config.Network.Ask = c.mode, c.ask
		err := checkAsk(Options{Config: &r, GateName: c.gate})
		if got := errors.Is(err, ErrAskNeedsGate); got != c.refused || (err != nil && !got) {
			t.Errorf("mode %s, gate %q, ask %v: %v", c.mode, c.gate, c.ask, err)
		}
	}
}
