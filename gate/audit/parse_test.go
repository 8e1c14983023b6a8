package audit

import (
	"errors"
	"testing"
)

func TestParseLine(t *testing.T) {
	e, err := ParseLine("aisb1 1764415320.123 sess 127.0.0.1 CONNECT allowed.test 443 200 5120 allowed")
	if err != nil || e.Event != EventAllowed || e.Host != "allowed.test" || e.Port != 443 || e.Status != 200 || e.Bytes != 5120 || e.Time.UnixMilli() != 1764415320123 {
		t.Errorf("%+v %v", e, err)
	}
	e, err = ParseLine("aisb1 1764415320.123 sess 127.0.0.1 - - - 0 0 -")
	if err != nil || e.Event != EventBlocked || e.Rule != RuleUntagged {
		t.Errorf("untagged line: %+v %v", e, err)
	}
	e, err = ParseLine("aisb1 1764415320.123 sess 127.0.0.1 GET evil host 80 403 10 not_listed")
	if err != nil || e.Host != "evil host" || e.Rule != RuleNotListed {
		t.Errorf("host with a space: %+v %v", e, err)
	}
	for _, bad := range []string{"", "aisb0 1 s c m h 1 2 3 r", "aisb1 x s c m h 1 2 3 r", "aisb1 1 s"} {
		if _, err := ParseLine(bad); err == nil {
			t.Errorf("ParseLine(%q) accepted", bad)
		}
	}
	e, err = ParseLine("aisb1 1764415320.123 sess 127.0.0.1 GET evil\x1b]0;pwned\x07.test 80 403 10 not_listed")
	if err != nil || e.Host != "evil?]0;pwned?.test" {
		t.Errorf("control bytes reach the terminal: %q %v", e.Host, err)
	}
	if e, ok := eventFor("garbage", "s"); !ok || e.Event != EventBlocked || e.Rule != RuleMalformed {
		t.Errorf("malformed line: %+v", e)
	}
}

// TestParseTLSLines: lines as squid-openssl writes them for the TLS step
// (measured); a tunnel terminated at the TLS step is never read as allowed.
func TestParseTLSLines(t *testing.T) {
	for _, c := range []struct {
		line        string
		event, rule string
		bookkeeping bool
	}{
		{"aisb2 1796060311.625 s 127.0.0.1 CONNECT allowed.test 443 200 2262 TCP_TUNNEL:HIER_DIRECT splice - allowed", EventAllowed, RuleAllowed, false},
		{"aisb2 1796060311.610 s 127.0.0.1 CONNECT allowed.test 443 200 0 NONE_NONE:HIER_NONE splice - allowed", "", "", true},
		{"aisb2 1796060311.634 s 127.0.0.1 CONNECT allowed.test 443 200 0 NONE_NONE:HIER_NONE terminate - sni_mismatch", EventBlocked, RuleSNIMismatch, false},
		{"aisb2 1796060311.638 s 127.0.0.1 CONNECT allowed.test 443 200 0 NONE_NONE:HIER_NONE terminate - no_sni", EventBlocked, RuleNoSNI, false},
		{"aisb2 1796060311.654 s 127.0.0.1 CONNECT allowed.test 443 200 0 NONE_NONE:HIER_NONE peek - not_tls", EventBlocked, RuleNotTLS, false},
		// Terminated without a tag of ours, or never reaching the TLS step.
		{"aisb2 1796060311.654 s 127.0.0.1 CONNECT allowed.test 443 200 0 NONE_NONE:HIER_NONE terminate - allowed", EventBlocked, RuleTerminated, false},
		{"aisb2 1796060311.654 s 127.0.0.1 CONNECT allowed.test 443 200 0 NONE_NONE:HIER_NONE - - allowed", EventBlocked, RuleTerminated, false},
		{"aisb2 1796060390.850 s 127.0.0.1 CONNECT api.allowed.test 443 200 0 NONE_NONE:HIER_DIRECT bump - bumped", EventAllowed, RuleBumped, false},
		{"aisb2 1796060390.917 s 127.0.0.1 GET api.allowed.test 443 200 227 TCP_MISS:HIER_DIRECT bump TEST_KEY credential", EventAllowed, RuleCredential, false},
		{"aisb2 1796060390.917 s 127.0.0.1 GET evil host 443 403 10 NONE_NONE:HIER_NONE - - not_listed", EventBlocked, RuleNotListed, false},
		// Measured: a credential host whose certificate did not verify.
		{"aisb2 1796060390.917 s 127.0.0.1 GET api.allowed.test 443 503 3740 NONE_NONE:HIER_NONE - - -", EventBlocked, RuleUpstream, false},
	} {
		e, err := ParseLine(c.line)
		if c.bookkeeping {
			if !errors.Is(err, ErrBookkeeping) {
				t.Errorf("%q: %+v %v, want bookkeeping", c.line, e, err)
			}
			continue
		}
		if err != nil || e.Event != c.event || e.Rule != c.rule {
			t.Errorf("%q: %+v %v, want %s %s", c.line, e, err, c.event, c.rule)
		}
	}
	e, _ := ParseLine("aisb2 1796060390.917 s 127.0.0.1 GET api.allowed.test 443 200 227 TCP_MISS:HIER_DIRECT bump TEST_KEY credential")
	if e.Credential != "TEST_KEY" || e.TLS != "bump" || e.Host != "api.allowed.test" || e.Bytes != 227 {
		t.Errorf("credential line: %+v", e)
	}
}

// FuzzParseLine: no input panics the audit parser; whatever it reads is
// either an allowed event with the allowed rule or a blocked one.
func FuzzParseLine(f *testing.F) {
	f.Add("aisb1 1764415320.123 sess 127.0.0.1 CONNECT allowed.test 443 200 5120 allowed")
	f.Add("aisb1 1764415320.123 sess 127.0.0.1 - - - 0 0 -")
	f.Add("aisb1 1e300 s c m h p s b r")
	f.Add("aisb1 -1 \x00 \xff GET a b c d allowed")
	f.Add("aisb2 1796060311.610 s 127.0.0.1 CONNECT allowed.test 443 200 0 NONE_NONE:HIER_NONE terminate - allowed")
	f.Add("aisb2 1 s c CONNECT h 443 200 0 NONE_NONE:HIER_NONE splice \x1b bumped")
	f.Fuzz(func(t *testing.T, line string) {
		e, err := ParseLine(line)
		if err != nil {
			return
		}
		if (e.Event == EventAllowed) != Allowed(e.Rule) {
			t.Fatalf("event %q with rule %q", e.Event, e.Rule)
		}
		for _, field := range []string{e.Host, e.Method, e.Session, e.Client, e.Rule, e.TLS, e.Credential} {
			for _, c := range []byte(field) {
				if c < 0x20 || c > 0x7e {
					t.Fatalf("unprintable byte %#x in %q", c, field)
				}
			}
		}
		_ = Advice(e)
	})
}

// TestParseHandoverLines: squid's check of its own TLS port and the front's
// line of a tunnel that failed to reach it, as squid 6.13 writes them; an
// SSH tunnel is not read as stopped at a TLS step it never meets.
func TestParseHandoverLines(t *testing.T) {
	if _, err := ParseLine("aisb2 1796073174.938 s " + SelfAddr + " - - - 0 0 NONE_NONE:HIER_NONE - - -"); !errors.Is(err, ErrBookkeeping) {
		t.Errorf("the TLS port check: %v, want bookkeeping", err)
	}
	// The same line from the sandbox's side is an event (blocked).
	e, err := ParseLine("aisb2 1796073174.938 s 127.0.0.1 - - - 0 0 NONE_NONE:HIER_NONE - - -")
	if err != nil || e.Event != EventBlocked || e.Rule != RuleUntagged {
		t.Errorf("an empty connection from the sandbox: %+v %v", e, err)
	}
	// A request from the gate's own address is never dropped.
	e, err = ParseLine("aisb2 1796073174.938 s " + SelfAddr + " CONNECT allowed.test 443 200 0 NONE_NONE:HIER_NONE terminate - sni_mismatch")
	if err != nil || e.Rule != RuleSNIMismatch {
		t.Errorf("a TLS port decision: %+v %v", e, err)
	}
	e, err = ParseLine("aisb2 1796060311.625 s 127.0.0.1 CONNECT allowed.test 443 500 0 NONE_NONE:HIER_NONE - - allowed")
	if err != nil || e.Event != EventBlocked || e.Rule != RuleTerminated {
		t.Errorf("a tunnel the front could not hand over: %+v %v", e, err)
	}
	e, err = ParseLine("aisb2 1796060311.625 s 127.0.0.1 CONNECT git.test 22 200 4120 TCP_TUNNEL:HIER_DIRECT - - allowed")
	if err != nil || e.Event != EventAllowed || e.Rule != RuleAllowed {
		t.Errorf("an SSH tunnel: %+v %v", e, err)
	}
}
