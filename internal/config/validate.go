package config

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/harness"
)

// validate runs every field's check, in field order; each returns its own
// problems, so one run reports everything wrong with the file at once.
func validate(f *File) []Problem {
	var ps []Problem
	for _, fd := range fields {
		if fd.check != nil {
			ps = append(ps, fd.check(f)...)
		}
	}
	return ps
}

func (f *File) problem(field, format string, args ...any) Problem {
	return Problem{File: f.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func checkVersion(f *File) []Problem {
	if !f.Defines("version") {
		return []Problem{f.problem("version", "missing; add \"version = %d\" at the top of the file", Version)}
	}
	if f.Config.Version != Version {
		return []Problem{f.problem("version", "%d is not supported; this aisb reads version = %d", f.Config.Version, Version)}
	}
	return nil
}

func checkMode(f *File) []Problem {
	if !f.Defines("network.mode") {
		return nil
	}
	if !f.Config.Network.Mode.Valid() {
		return []Problem{f.problem("network.mode", "%q is not a mode; write one of %s", f.Config.Network.Mode, modeList())}
	}
	return nil
}

func modeList() string {
	var s []string
	for _, m := range contract.Modes {
		s = append(s, string(m))
	}
	return strings.Join(s, ", ")
}

func checkAllowedHosts(f *File) []Problem {
	hosts, errs := allowlist.Parse(f.Config.Network.AllowedHosts)
	f.Hosts = hosts
	return entryProblems(f, "network.allowed_hosts", errs)
}

// entryProblems is one problem per refused entry of a host list, named by
// its index in field.
func entryProblems(f *File, field string, errs []*allowlist.EntryError) []Problem {
	var ps []Problem
	for _, e := range errs {
		ps = append(ps, f.problem(fmt.Sprintf("%s[%d]", field, e.Index), "%s", e.Error()))
	}
	return ps
}

func checkAskTimeout(f *File) []Problem {
	if !f.Defines("network.ask_timeout") {
		return nil
	}
	if t := f.Config.Network.AskTimeout; t < 1 || t > MaxAskTimeout {
		return []Problem{f.problem("network.ask_timeout", "%d: write a number of seconds from 1 to %d", t, MaxAskTimeout)}
	}
	return nil
}

func checkHostPorts(f *File) []Problem {
	var ps []Problem
	seen := map[int]bool{}
	for i, p := range f.Config.Network.HostPorts {
		field := fmt.Sprintf("network.host_ports[%d]", i)
		switch {
		case p < 1 || p > 65535:
			ps = append(ps, f.problem(field, "%d is not a TCP port; write a number from 1 to 65535", p))
		case seen[p]:
			ps = append(ps, f.problem(field, "%d is listed twice; remove one", p))
		}
		seen[p] = true
	}
	return ps
}

func checkDNS(f *File) []Problem {
	var ps []Problem
	for i, s := range f.Config.Network.DNS {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.String() != s {
			ps = append(ps, f.problem(fmt.Sprintf("network.dns[%d]", i), "%q is not an IP address; write the resolver's address alone, such as \"192.0.2.53\" (no port, no name)", s))
		}
	}
	return ps
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv are set by aisb itself to steer the sandbox through its gate;
// configuration may not override them.
var reservedEnv = map[string]bool{
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true,
	"http_proxy": true, "https_proxy": true, "no_proxy": true, "all_proxy": true,
	"NODE_USE_ENV_PROXY": true, "npm_config_proxy": true, "npm_config_https_proxy": true,
	"HOME": true, "SSH_AUTH_SOCK": true,
}

// CheckEnvName says what is wrong with an environment variable name, or "".
func CheckEnvName(name string) string {
	switch {
	case !envName.MatchString(name):
		return fmt.Sprintf("%q is not a variable name; use letters, digits and underscores, not starting with a digit", name)
	case name == "SSH_AUTH_SOCK":
		return fmt.Sprintf("%q is set by aisb itself when --ssh-agent forwards your agent; use that instead", name)
	case reservedEnv[name] || strings.HasPrefix(name, "AISB_"):
		return fmt.Sprintf("%q is set by aisb itself to keep the sandbox on its gate; remove it", name)
	}
	return ""
}

func checkEnvPass(f *File) []Problem {
	var ps []Problem
	seen := map[string]bool{}
	for i, n := range f.Config.Env.Pass {
		field := fmt.Sprintf("env.pass[%d]", i)
		if msg := CheckEnvName(n); msg != "" {
			ps = append(ps, f.problem(field, "%s", msg))
		} else if seen[n] {
			ps = append(ps, f.problem(field, "%q is listed twice; remove one", n))
		}
		seen[n] = true
	}
	return ps
}

func checkEnvSet(f *File) []Problem {
	var ps []Problem
	for _, n := range sortedKeys(f.Config.Env.Set) {
		field := "env.set." + keyName(n)
		if msg := CheckEnvName(n); msg != "" {
			ps = append(ps, f.problem(field, "%s", msg))
		} else if strings.ContainsRune(f.Config.Env.Set[n], 0) {
			ps = append(ps, f.problem(field, "the value contains a NUL byte, which no environment can hold; remove it"))
		}
	}
	return ps
}

func checkPids(f *File) []Problem {
	if p := f.Config.Limits.Pids; p < 0 {
		return []Problem{f.problem("limits.pids", "%d is negative; write a positive number of processes, or leave it out for no limit", p)}
	}
	return nil
}

func checkMemory(f *File) []Problem {
	if m := f.Config.Limits.Memory; m != "" {
		if _, err := ParseMemory(m); err != nil {
			return []Problem{f.problem("limits.memory", "%v", err)}
		}
	}
	return nil
}

func checkCPUs(f *File) []Problem {
	switch c := f.Config.Limits.CPUs; {
	case c < 0:
		return []Problem{f.problem("limits.cpus", "%g is negative; write a positive number such as 1.5, or leave it out for no limit", c)}
	case c > 0 && c < MinCPUs:
		return []Problem{f.problem("limits.cpus", "%s", cpusTooSmall(c))}
	}
	return nil
}

// MinCPUs is the smallest CPU limit: 1 ms of CPU per 100 ms period, the
// kernel's minimum quota. Anything smaller rounds to a quota of 0, which the
// runtime reads as no limit at all.
const MinCPUs = 0.01

func cpusTooSmall(v float64) string {
	return fmt.Sprintf("%g is below the minimum %g (a smaller value rounds to no limit at all); write %g or more, or leave it out for no limit", v, MinCPUs, MinCPUs)
}

// ParseMemory reads a size such as "512m", "2g" or "1048576" (bytes).
func ParseMemory(s string) (int64, error) {
	bad := fmt.Errorf("%q is not a size; write a number with an optional unit k, m or g, such as \"2g\"", s)
	num, mult := strings.ToLower(s), int64(1)
	for suffix, m := range map[string]int64{"k": 1 << 10, "m": 1 << 20, "g": 1 << 30} {
		if strings.HasSuffix(num, suffix) || strings.HasSuffix(num, suffix+"b") {
			num, mult = strings.TrimSuffix(strings.TrimSuffix(num, "b"), suffix), m
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, bad
	}
	return n * mult, nil
}

func checkHarness(f *File) []Problem {
	if !f.Defines("sandbox.harness") {
		return nil
	}
	if _, err := harness.Lookup(f.Config.Sandbox.Harness); err != nil {
		return []Problem{f.problem("sandbox.harness", "%v", err)}
	}
	return nil
}

func checkState(f *File) []Problem {
	if !f.Defines("sandbox.state") {
		return nil
	}
	if _, err := ParseStateScope(string(f.Config.Sandbox.State)); err != nil {
		return []Problem{f.problem("sandbox.state", "%v", err)}
	}
	return nil
}

func checkBaseImage(f *File) []Problem {
	if !f.Defines("sandbox.base_image") {
		return nil
	}
	s := f.Config.Sandbox.BaseImage
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
		return []Problem{f.problem("sandbox.base_image", "%q is not an image reference; write one such as %q", s, DefaultBaseImage)}
	}
	return nil
}

// keyName is a TOML key as a field name: bare when it may be, else quoted
// with everything outside printable ASCII escaped.
func keyName(k string) string {
	if k != "" && strings.Trim(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == "" {
		return k
	}
	return strconv.QuoteToASCII(k)
}

// checkLogSize checks logs.session_max or logs.total_max, value v.
func checkLogSize(f *File, key, v string) []Problem {
	if !f.Defines(key) {
		return nil
	}
	if n, err := ParseMemory(v); err != nil {
		return []Problem{f.problem(key, "%v", err)}
	} else if n < 4096 {
		return []Problem{f.problem(key, "%q is below 4k, too small for an audit; write a size such as \"64m\"", v)}
	}
	return nil
}
