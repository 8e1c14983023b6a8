package session

import (
	"errors"
	"fmt"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/sandbox"
)

// DefaultEnv are the only host variables passed without being named.
var DefaultEnv = []string{"TERM", "COLORTERM", "LANG"}

// buildEnv is the sandbox's whole environment before the proxy variables:
// DefaultEnv when set, env.pass from aisb's own environment (a name that is
// not set is an error, not a silent gap), and env.set.
func buildEnv(e config.Env, lookup func(string) (string, bool)) (map[string]string, error) {
	env := map[string]string{}
	for _, k := range DefaultEnv {
		if v, ok := lookup(k); ok {
			env[k] = v
		}
	}
	for _, k := range e.Pass {
		v, ok := lookup(k)
		if !ok {
			return nil, fmt.Errorf("env: %s is to be passed but is not set in your environment; set it or drop --env %s", k, k)
		}
		env[k] = v
	}
	for k, v := range e.Set {
		env[k] = v
	}
	return env, nil
}

// proxyEnv steers every common client through the gate at proxy.
func proxyEnv(proxy string) map[string]string {
	// git asks its proxy which authentication it wants before it sends
	// any (curl's CURLAUTH_ANY) unless told: basic sends the gate's token
	// with the first request, as every other client does.
	env := map[string]string{"NODE_USE_ENV_PROXY": "1", "GIT_HTTP_PROXY_AUTHMETHOD": "basic"}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "npm_config_proxy", "npm_config_https_proxy"} {
		env[k] = proxy
	}
	env["NO_PROXY"], env["no_proxy"] = "localhost,127.0.0.1,::1", "localhost,127.0.0.1,::1"
	return env
}

type limits struct {
	pids, memory int64
	cpus         float64
	rlimits      []sandbox.Rlimit
}

// resolveLimits keeps cgroup limits as asked (Podman's own warning is
// checked at create time), or with the rlimit fallback turns them into
// POSIX rlimits: nproc (per mapped uid), data (per process), cpu seconds.
func resolveLimits(l config.Limits, fallback bool, cpuSeconds uint64) (limits, error) {
	var out limits
	var mem int64
	if l.Memory != "" {
		var err error
		if mem, err = config.ParseMemory(l.Memory); err != nil {
			return out, fmt.Errorf("limits.memory: %w", err)
		}
	}
	if !fallback {
		if cpuSeconds > 0 {
			return out, errors.New("--cpu-seconds is an rlimit: it needs --rlimit-fallback")
		}
		return limits{pids: int64(l.Pids), memory: mem, cpus: l.CPUs}, nil
	}
	if l.CPUs > 0 {
		return out, errors.New("--cpus cannot be enforced with the rlimit fallback (no rlimit bounds a CPU rate); use --cpu-seconds for a total CPU time")
	}
	if l.Pids > 0 {
		out.rlimits = append(out.rlimits, sandbox.Rlimit{Type: "nproc", Value: uint64(l.Pids)})
	}
	if mem > 0 {
		out.rlimits = append(out.rlimits, sandbox.Rlimit{Type: "data", Value: uint64(mem)})
	}
	if cpuSeconds > 0 {
		out.rlimits = append(out.rlimits, sandbox.Rlimit{Type: "cpu", Value: cpuSeconds})
	}
	return out, nil
}
