package session

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/sandbox"
)

// The refusals a session decides before any container exists, as the pure
// functions that decide them; tests/ keeps one end-to-end test of each kind
// (TestLimits, TestExplicitEnvironment, TestNoGate).

func TestResolveLimitsRefusals(t *testing.T) {
	for _, c := range []struct {
		name       string
		limits     config.Limits
		fallback   bool
		cpuSeconds uint64
		refusal    string
	}{
		{"cpu seconds without the fallback", config.Limits{}, false, 10, "--cpu-seconds is an rlimit: it needs --rlimit-fallback"},
		{"cpus with the fallback", config.Limits{CPUs: 1}, true, 0, "--cpus cannot be enforced with the rlimit fallback"},
		{"cpus and more with the fallback", config.Limits{CPUs: 0.5, Pids: 64, Memory: "1g"}, true, 0, "--cpus cannot be enforced with the rlimit fallback"},
		{"unreadable memory", config.Limits{Memory: "lots"}, false, 0, "limits.memory"},
		{"unreadable memory with the fallback", config.Limits{Memory: "12q"}, true, 0, "limits.memory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := resolveLimits(c.limits, c.fallback, c.cpuSeconds); err == nil || !strings.Contains(err.Error(), c.refusal) {
				t.Errorf("resolveLimits(%+v, fallback %v, cpu %d) = %v, want a refusal saying %q", c.limits, c.fallback, c.cpuSeconds, err, c.refusal)
			}
		})
	}
}

// The controls: what the refusals leave alone passes, as asked.
func TestResolveLimitsKept(t *testing.T) {
	t.Run("cgroup limits as asked", func(t *testing.T) {
		l, err := resolveLimits(config.Limits{Pids: 64, Memory: "1m", CPUs: 1.5}, false, 0)
		if err != nil || l.pids != 64 || l.memory != 1<<20 || l.cpus != 1.5 || len(l.rlimits) != 0 {
			t.Errorf("got %+v, %v", l, err)
		}
	})
	t.Run("the fallback's rlimits", func(t *testing.T) {
		l, err := resolveLimits(config.Limits{Pids: 64, Memory: "1m"}, true, 30)
		want := []sandbox.Rlimit{{Type: "nproc", Value: 64}, {Type: "data", Value: 1 << 20}, {Type: "cpu", Value: 30}}
		if err != nil || l.pids != 0 || l.memory != 0 || len(l.rlimits) != len(want) {
			t.Fatalf("got %+v, %v", l, err)
		}
		for i, r := range want {
			if l.rlimits[i] != r {
				t.Errorf("rlimit %d: got %+v, want %+v", i, l.rlimits[i], r)
			}
		}
	})
	t.Run("none", func(t *testing.T) {
		if l, err := resolveLimits(config.Limits{}, true, 0); err != nil || len(l.rlimits) != 0 {
			t.Errorf("got %+v, %v", l, err)
		}
	})
}

func TestBuildEnvRefusesUnset(t *testing.T) {
	lookup := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	t.Run("unset", func(t *testing.T) {
		_, err := buildEnv(config.Env{Pass: []string{"NOT_SET_ANYWHERE"}}, lookup(nil))
		if err == nil || !strings.Contains(err.Error(), "NOT_SET_ANYWHERE is to be passed but is not set") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("one of several unset", func(t *testing.T) {
		_, err := buildEnv(config.Env{Pass: []string{"SET", "UNSET"}}, lookup(map[string]string{"SET": "1"}))
		if err == nil || !strings.Contains(err.Error(), "UNSET is to be passed") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("set, even empty", func(t *testing.T) {
		env, err := buildEnv(config.Env{Pass: []string{"EMPTY", "FULL"}}, lookup(map[string]string{"EMPTY": "", "FULL": "x"}))
		if err != nil || env["EMPTY"] != "" || env["FULL"] != "x" {
			t.Errorf("got %v, %v", env, err)
		}
		if _, ok := env["EMPTY"]; !ok {
			t.Errorf("an empty variable named in env.pass was dropped")
		}
	})
	t.Run("nothing unnamed", func(t *testing.T) {
		env, err := buildEnv(config.Env{}, lookup(map[string]string{"TERM": "xterm", "SECRET": "s", "HOME": "/root"}))
		if err != nil || len(env) != 1 || env["TERM"] != "xterm" {
			t.Errorf("got %v, %v: only DefaultEnv passes unnamed", env, err)
		}
	})
}

// TestPinRefusesInternal: no-gate mode never pins an internal address or a
// network touching one, whatever the host's own addresses; the control, a
// public address and network, is pinned. No name is resolved.
func TestPinRefusesInternal(t *testing.T) {
	noDNS := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		t.Error("pin resolved a name although only addresses were listed")
		return nil, net.ErrClosed
	}}
	logf := func(string, ...any) {}
	for _, c := range []struct{ entry, refusal string }{
		{"127.0.0.1", "is an internal address"},
		{"10.1.2.3", "is an internal address"},
		{"172.16.0.1", "is an internal address"},
		{"192.168.1.1", "is an internal address"},
		{"169.254.169.254", "is an internal address"},
		{"100.64.0.1", "is an internal address"},
		{"0.0.0.0", "is an internal address"},
		{"10.0.0.0/8", "overlaps the internal range"},
		{"172.16.0.0/12", "overlaps the internal range"},
		{"169.254.0.0/16", "overlaps the internal range"},
		{"100.0.0.0/8", "overlaps the internal range"},
		{"127.0.0.0/8", "overlaps the internal range"},
		{"192.168.0.0/16", "overlaps the internal range"},
	} {
		t.Run(c.entry, func(t *testing.T) {
			hosts, errs := allowlist.Parse([]string{c.entry})
			if len(errs) > 0 {
				t.Fatalf("parse %s: %v", c.entry, errs[0])
			}
			_, err := pin(context.Background(), noDNS, hosts, logf)
			if err == nil || !strings.Contains(err.Error(), c.refusal) || !strings.Contains(err.Error(), "never admitted") {
				t.Errorf("pin %s: %v, want a refusal saying %q", c.entry, err, c.refusal)
			}
		})
	}
	t.Run("control", func(t *testing.T) {
		hosts, errs := allowlist.Parse([]string{"8.8.8.8", "9.9.9.0/24"})
		if len(errs) > 0 {
			t.Fatal(errs[0])
		}
		p, err := pin(context.Background(), noDNS, hosts, logf)
		if err != nil || len(p.addrs) != 1 || len(p.nets) != 1 {
			t.Errorf("a public address and network: %+v, %v", p, err)
		}
	})
}
