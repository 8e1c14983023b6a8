package session

import (
	"errors"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/config"
)

func TestGateCredentials(t *testing.T) {
	cs := []config.Credential{
		{Host: "api.openai.com", Header: "authorization", Env: "OPENAI_API_KEY", Prefix: "Bearer "},
	}
	env := map[string]string{"OPENAI_API_KEY": "sk-real"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	got, err := gateCredentials(cs, lookup)
	if err != nil || len(got) != 1 || got[0].Value != "Bearer sk-real" || got[0].Name != "OPENAI_API_KEY" {
		t.Fatalf("%+v %v", got, err)
	}
	sandboxEnv := map[string]string{}
	credentialEnv(sandboxEnv, got)
	if sandboxEnv["OPENAI_API_KEY"] != Placeholder {
		t.Errorf("sandbox env %v", sandboxEnv)
	}
	// Unset, and a value squid.conf cannot carry: errors that never show it.
	if _, err := gateCredentials(cs, func(string) (string, bool) { return "", false }); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY is not set") {
		t.Errorf("unset: %v", err)
	}
	env["OPENAI_API_KEY"] = "sk-\"quoted\nline"
	if _, err := gateCredentials(cs, lookup); err == nil || strings.Contains(err.Error(), "quoted") {
		t.Errorf("bad value: %v", err)
	}
}

func TestCredentialMode(t *testing.T) {
	if err := checkCredentialMode(1, contract.ModeAllow, ""); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		mode contract.Mode
		gate string
	}{{contract.ModeNoGate, ""}, {contract.ModeOpen, ""}, {contract.ModeNone, ""}, {contract.ModeAllow, "shared"}} {
		if err := checkCredentialMode(1, c.mode, c.gate); !errors.Is(err, ErrCredentialNeedsGate) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := checkCredentialMode(0, contract.ModeNone, "x"); err != nil {
		t.Error(err)
	}
}
