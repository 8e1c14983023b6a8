package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/allowlist"
)

func TestParseValid(t *testing.T) {
	f, err := Parse("config.toml", []byte(`
version = 1
[network]
mode = "allow"
allowed_hosts = [".github.com", "registry.npmjs.example", "192.0.2.7"]
host_ports = [11434]
dns = ["198.51.100.10"]
[env]
pass = ["ANTHROPIC_API_KEY"]
set = { GIT_AUTHOR_NAME = "agent" }
[limits]
pids = 256
memory = "2g"
cpus = 1.5
[sandbox]
harness = "shell"
base_image = "localhost/aisb-base:trixie"
`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Config.Network.Mode != contract.ModeAllow || len(f.Config.Network.AllowedHosts) != 3 || f.Config.Env.Set["GIT_AUTHOR_NAME"] != "agent" {
		t.Errorf("decoded %+v", f.Config)
	}
}

func TestParseProblems(t *testing.T) {
	tests := []struct {
		name, toml string
		want       string // one full problem line
	}{
		{"missing version", `[network]`, `config.toml: version: missing; add "version = 1" at the top of the file`},
		{"wrong version", `version = 2`, `config.toml: version: 2 is not supported; this aisb reads version = 1`},
		{"unknown top key", "version = 1\nfoo = 1", `config.toml: foo: unknown key; the keys at the top level are version, network, env, limits, sandbox`},
		{"unknown network key", "version = 1\n[network]\nallowd_hosts = []", `config.toml: network.allowd_hosts: unknown key; the keys in [network] are mode, allowed_hosts, ssh_hosts, host_ports, dns`},
		{"syntax", "version = 1\nnetwork = \n", `config.toml:2: `},
		{"type", "version = 1\n[network]\nhost_ports = \"80\"", `config.toml: `},
		{"mode", "version = 1\n[network]\nmode = \"wide\"", `config.toml: network.mode: "wide" is not a mode; write one of none, allow, no-gate, open`},
		{"wildcard", "version = 1\n[network]\nallowed_hosts = [\"a.example\", \"b.example\", \"*.example.com\"]",
			`config.toml: network.allowed_hosts[2]: "*.example.com": wildcards are not allowed; write ".example.com" for the domain and all its subdomains`},
		{"scheme", "version = 1\n[network]\nallowed_hosts = [\"https://example.com/x\"]", `config.toml: network.allowed_hosts[0]: "https://example.com/x": a scheme is not allowed; write the host name alone, such as "example.com"`},
		{"port", "version = 1\n[network]\nallowed_hosts = [\"example.com:443\"]", `network.allowed_hosts[0]: "example.com:443": a port is not allowed`},
		{"path", "version = 1\n[network]\nallowed_hosts = [\"example.com/a\"]", `network.allowed_hosts[0]: "example.com/a": a path or query is not allowed`},
		{"uppercase", "version = 1\n[network]\nallowed_hosts = [\"Example.COM\"]", `network.allowed_hosts[0]: "Example.COM": uppercase letters are not allowed; write "example.com"`},
		{"non-ascii", "version = 1\n[network]\nallowed_hosts = [\"bücher.example\"]", `write the punycode form "xn--bcher-kva.example"`},
		{"newline", "version = 1\n[network]\nallowed_hosts = [\"a.example\\nhttp_access allow all\"]", `contains whitespace or a control character`},
		{"empty", "version = 1\n[network]\nallowed_hosts = [\"\"]", `network.allowed_hosts[0]: "": empty entry`},
		{"lone dot", "version = 1\n[network]\nallowed_hosts = [\".\"]", `network.allowed_hosts[0]: ".": a lone dot is not a host`},
		{"ipv6", "version = 1\n[network]\nallowed_hosts = [\"::1\"]", `network.allowed_hosts[0]: "::1": IPv6 literals are not allowed`},
		{"int ipv4", "version = 1\n[network]\nallowed_hosts = [\"2130706433\"]", `"2130706433": integer, hex, octal and short IPv4 forms are not allowed; write "127.0.0.1"`},
		{"hex ipv4", "version = 1\n[network]\nallowed_hosts = [\"0x7f.0.0.1\"]", `write "127.0.0.1"`},
		{"octal ipv4", "version = 1\n[network]\nallowed_hosts = [\"0177.0.0.1\"]", `write "127.0.0.1"`},
		{"short ipv4", "version = 1\n[network]\nallowed_hosts = [\"127.1\"]", `write "127.0.0.1"`},
		{"duplicate", "version = 1\n[network]\nallowed_hosts = [\"a.example\", \"a.example\"]", `network.allowed_hosts[1]: "a.example": duplicate of entry 0; remove it`},
		{"covered", "version = 1\n[network]\nallowed_hosts = [\".example.com\", \"api.example.com\"]", `network.allowed_hosts[1]: "api.example.com": already covered by ".example.com" (entry 0); remove it`},
		{"port range", "version = 1\n[network]\nhost_ports = [0]", `network.host_ports[0]: 0 is not a TCP port`},
		{"dns name", "version = 1\n[network]\ndns = [\"dns.example\"]", `network.dns[0]: "dns.example" is not an IP address`},
		{"env name", "version = 1\n[env]\npass = [\"1BAD\"]", `env.pass[0]: "1BAD" is not a variable name`},
		{"env reserved", "version = 1\n[env]\nset = { HTTPS_PROXY = \"http://elsewhere\" }", `env.set.HTTPS_PROXY: "HTTPS_PROXY" is set by aisb itself`},
		{"memory", "version = 1\n[limits]\nmemory = \"lots\"", `limits.memory: "lots" is not a size`},
		{"pids", "version = 1\n[limits]\npids = -1", `limits.pids: -1 is negative`},
		{"harness", "version = 1\n[sandbox]\nharness = \"vim\"", `sandbox.harness: unknown harness "vim"; choose one of claude, codex, opencode, pi, shell`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("config.toml", []byte(tt.toml))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got\n%s\nwant a line containing\n%s", err, tt.want)
			}
		})
	}
}

func TestParseMemory(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "512m": 512 << 20, "2g": 2 << 30, "2GB": 2 << 30, "64k": 64 << 10} {
		if got, err := ParseMemory(in); err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "g", "1.5g", "1t"} {
		if _, err := ParseMemory(in); err == nil {
			t.Errorf("ParseMemory(%q) accepted", in)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestResolveDefaults(t *testing.T) {
	dir := t.TempDir()
	r, err := Resolve(Sources{UserFile: filepath.Join(dir, "missing.toml"), ProjectDir: dir, TrustFile: filepath.Join(dir, "trusted")})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Config
	if c.Network.Mode != contract.ModeAllow || len(r.Allowlist) != 0 || len(c.Env.Pass) != 0 || len(c.Env.Set) != 0 || c.Sandbox.Harness != "pi" {
		t.Errorf("defaults are not the safe ones: %+v", c)
	}
}

func TestProjectFileOnlyNarrowsUntilTrusted(t *testing.T) {
	dir := t.TempDir()
	src := Sources{UserFile: filepath.Join(dir, "user.toml"), ProjectDir: filepath.Join(dir, "proj"), TrustFile: filepath.Join(dir, "trusted")}
	writeFile(t, src.UserFile, `version = 1
[network]
mode = "allow"
allowed_hosts = [".github.com", "api.anthropic.com"]
host_ports = [11434]
[env]
pass = ["ANTHROPIC_API_KEY"]
[limits]
pids = 100
`)
	project := `version = 1
[network]
mode = "open"
allowed_hosts = ["api.github.com", "evil.example"]
host_ports = [11434, 22]
dns = ["192.0.2.53"]
[env]
pass = ["ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY"]
set = { NODE_OPTIONS = "--require /project/x.js" }
[limits]
pids = 1000
[sandbox]
harness = "claude"
`
	writeFile(t, filepath.Join(src.ProjectDir, ProjectFileName), project)

	r, err := Resolve(src)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Config
	if c.Network.Mode != contract.ModeAllow {
		t.Errorf("mode widened to %q", c.Network.Mode)
	}
	if fmt.Sprint(r.Allowlist) != "[api.github.com]" || len(c.Network.AllowedHosts) != 0 {
		t.Errorf("allowlist = %v (strings %q), want only the narrowed api.github.com", r.Allowlist, c.Network.AllowedHosts)
	}
	if !slices.Equal(c.Network.HostPorts, []int{11434}) || !slices.Equal(c.Env.Pass, []string{"ANTHROPIC_API_KEY"}) {
		t.Errorf("ports %v, pass %v", c.Network.HostPorts, c.Env.Pass)
	}
	if len(c.Network.DNS) != 0 || len(c.Env.Set) != 0 || c.Sandbox.Harness != "pi" || c.Limits.Pids != 100 {
		t.Errorf("widening kept: %+v", c)
	}
	notices := strings.Join(r.Notices, "\n")
	for _, want := range []string{`network.mode ignored`, `"evil.example" ignored`, `host_ports 22 ignored`, `"AWS_SECRET_ACCESS_KEY" ignored`, `env.set.NODE_OPTIONS ignored`, `network.dns ignored`, `sandbox.harness ignored`, `limits.pids ignored`, "aisb trust"} {
		if !strings.Contains(notices, want) {
			t.Errorf("notices lack %q:\n%s", want, notices)
		}
	}

	// Trusted: the exact content now applies whole.
	if err := Trust(src.TrustFile, filepath.Join(src.ProjectDir, ProjectFileName), []byte(project)); err != nil {
		t.Fatal(err)
	}
	r, err = Resolve(src)
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.Network.Mode != contract.ModeOpen || len(r.Notices) != 0 || r.Config.Sandbox.Harness != "claude" {
		t.Errorf("trusted file not applied: %+v, notices %q", r.Config, r.Notices)
	}

	// Any change makes it untrusted again.
	writeFile(t, filepath.Join(src.ProjectDir, ProjectFileName), project+"\n# edited\n")
	r, err = Resolve(src)
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.Network.Mode != contract.ModeAllow || len(r.Notices) == 0 {
		t.Errorf("edited file still trusted: mode %q", r.Config.Network.Mode)
	}
}

func TestProjectFileNarrows(t *testing.T) {
	dir := t.TempDir()
	src := Sources{UserFile: filepath.Join(dir, "user.toml"), ProjectDir: dir, TrustFile: filepath.Join(dir, "trusted")}
	writeFile(t, src.UserFile, "version = 1\n[network]\nallowed_hosts = [\".github.com\"]\n")
	writeFile(t, filepath.Join(dir, ProjectFileName), "version = 1\n[network]\nmode = \"none\"\nallowed_hosts = []\n[limits]\npids = 50\nmemory = \"1g\"\n")
	r, err := Resolve(src)
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.Network.Mode != contract.ModeNone || len(r.Allowlist) != 0 || r.Config.Limits.Pids != 50 || r.Config.Limits.Memory != "1g" {
		t.Errorf("narrowing not applied: %+v notices %q", r.Config, r.Notices)
	}
	// A change of mode is said; nothing was ignored.
	if len(r.Notices) != 1 || !strings.Contains(r.Notices[0], `network.mode "none" applied`) {
		t.Errorf("notices %q", r.Notices)
	}
}

func TestInvalidProjectFileFails(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ProjectFileName), "version = 1\n[network]\nallowed_hosts = [\"*.x.example\"]\n")
	_, err := Resolve(Sources{ProjectDir: dir, TrustFile: filepath.Join(dir, "trusted")})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), ".aisb.toml: network.allowed_hosts[0]") {
		t.Errorf("got %v", err)
	}
}

func TestOverrides(t *testing.T) {
	r := &Resolved{Config: Default()}
	r.Allowlist, _ = allowlist.Parse([]string{"api.example.com", "b.example"})
	err := r.Apply(Overrides{Mode: "none", Allow: []string{".example.com", "b.example", "c.example"}, HostPorts: []int{11434, 11434}, Env: []string{"FOO", "BAR=baz"}, Pids: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range r.Allowlist {
		got = append(got, h.String())
	}
	if strings.Join(got, " ") != "b.example .example.com c.example" || r.Config.Network.Mode != contract.ModeNone ||
		!slices.Equal(r.Config.Network.HostPorts, []int{11434}) || !slices.Equal(r.Config.Env.Pass, []string{"FOO"}) ||
		r.Config.Env.Set["BAR"] != "baz" || r.Config.Limits.Pids != 10 {
		t.Errorf("applied: %q %+v", got, r.Config)
	}
	for _, o := range []Overrides{{Mode: "wide"}, {Allow: []string{"*.x.example"}}, {HostPorts: []int{70000}}, {Env: []string{"HTTPS_PROXY=x"}}, {Harness: "vim"}, {Memory: "lots"}} {
		r := &Resolved{Config: Default()}
		err := r.Apply(o)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "command line: --") {
			t.Errorf("Apply(%+v) = %v", o, err)
		}
	}
}

func TestJoinHarness(t *testing.T) {
	r := &Resolved{Config: Default()}
	r.Allowlist, _ = allowlist.Parse([]string{".anthropic.com"})
	if err := r.JoinHarness(); err != nil {
		t.Fatal(err)
	}
	// pi's api.anthropic.com is covered already; its other hosts join.
	if fmt.Sprint(r.Allowlist) != "[.anthropic.com api.openai.com generativelanguage.googleapis.com]" || len(r.HarnessHosts) != 2 {
		t.Errorf("allowlist %v, harness hosts %v", r.Allowlist, r.HarnessHosts)
	}
	none := &Resolved{Config: Default()}
	none.Config.Network.Mode = contract.ModeNone
	if err := none.JoinHarness(); err != nil || len(none.Allowlist) != 0 {
		t.Errorf("mode none: %v %v", none.Allowlist, err)
	}
}
