package contract

import (
	"errors"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"version":1,"mode":"allow","gate":{"addr":"100.64.0.1","port":3128}}`))
	if err != nil || p.Gate.Port != 3128 || p.AwaitGate {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err := ParsePolicy([]byte(`{"version":1,"mode":"allow","gate":{"addr":"100.64.0.1","port":3128},"await_gate":true}`)); err != nil || !p.AwaitGate {
		t.Fatalf("await_gate: %+v %v", p, err)
	}
	for _, bad := range []string{``, `{}`, `{"version":1,"mode":"allow","gate":{"addr":"100.64.0.1","port":3128},"extra":1}`,
		`{"version":1,"mode":"none"} {}`, `{"version":1,"mode":"allow","gate":{"addr":"not-an-ip","port":1}}`,
		`{"version":1,"mode":"none","await_gate":true}`} {
		if _, err := ParsePolicy([]byte(bad)); !errors.Is(err, ErrPolicy) {
			t.Errorf("ParsePolicy(%q) = %v, want ErrPolicy", bad, err)
		}
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	p := Policy{Version: PolicyVersion, Mode: ModeNone}
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParsePolicy(b)
	if err != nil || back.Mode != ModeNone {
		t.Fatalf("%s: %+v %v", b, back, err)
	}
	if _, err := (Policy{Version: PolicyVersion, Mode: "wide"}).Marshal(); !errors.Is(err, ErrPolicy) {
		t.Fatalf("an invalid policy was written: %v", err)
	}
}
