package entrypoint_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/entrypoint"
	"github.com/aisb-dev/aisb/internal/netnstest"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestTrace: with TraceEnv set the entrypoint prints its phases on stderr
// and the variable does not reach the command; without it, nothing is
// printed (the control).
func TestTrace(t *testing.T) {
	testhost.RequireRoot(t)
	ep := testhost.Binary(t, "cmd/aisb-entrypoint")
	ns := netnstest.New(t)
	policy := writePolicy(t, contract.Policy{Version: 1, Mode: contract.ModeAllow,
		Gate: &contract.Endpoint{Addr: mustAddr(hostAddr), Port: 8080}})
	run := func(env ...string) testhost.Result {
		cmd := ns.Command(ep, "--policy", policy, "--status", statusFile(t), "--", "/usr/bin/env")
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		return testhost.Run(t, cmd)
	}
	r := run(entrypoint.TraceEnv + "=" + strconv.FormatInt(time.Now().UnixNano(), 10))
	if r.Code != 0 {
		t.Fatal(r)
	}
	if strings.Contains(r.Stdout, entrypoint.TraceEnv) {
		t.Errorf("the command's environment holds %s:\n%s", entrypoint.TraceEnv, r.Stdout)
	}
	for _, phase := range []string{"process start to main", "table installed", "table read back", "privileges dropped", "status written"} {
		if !strings.Contains(r.Stderr, entrypoint.TracePrefix+phase+" ") {
			t.Errorf("stderr lacks the phase %q:\n%s", phase, r.Stderr)
		}
	}
	if r := run(); r.Code != 0 || strings.Contains(r.Stderr, entrypoint.TracePrefix) {
		t.Errorf("without %s: %s", entrypoint.TraceEnv, r)
	}
}
