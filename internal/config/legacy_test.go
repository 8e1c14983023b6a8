package config

// The configuration's code before the field table (issue 26 item 5), kept
// to compare old and new behaviour on many inputs.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/safefile"
)

func legacyWidens(userFile string, f *File) ([]string, error) {
	r, err := legacyResolve(Sources{UserFile: userFile})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range r.legacynarrow(f) {
		out = append(out, w.field)
	}
	return out, nil
}
func legacyResolve(src Sources) (*Resolved, error) {
	r := &Resolved{Config: Default()}
	if src.UserFile != "" {
		f, err := legacyReadFile(src.UserFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			r.legacymerge(f)
		}
	}
	if src.ProjectDir != "" {
		path, err := filepath.Abs(filepath.Join(src.ProjectDir, ProjectFileName))
		if err != nil {
			return nil, err
		}
		f, err := legacyReadProjectFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			if err := legacyrefuseProjectSecrets(f, src.UserFile); err != nil {
				return nil, err
			}
			trusted, err := IsTrusted(src.TrustFile, path, f.Content)
			if err != nil {
				return nil, err
			}
			agent := r.Config.Sandbox.SSHAgent
			r.ProjectFile = f
			if trusted {
				r.legacymerge(f)
			} else {
				for _, w := range r.legacynarrow(f) {
					r.Notices = append(r.Notices, fmt.Sprintf("%s: %s ignored: %s; run `aisb trust` to accept this file as it is", f.Name, w.field, w.why))
				}
			}
			r.legacykeepAgentOff(f, agent)
		}
	}
	return r, nil
}
func (r *Resolved) legacymerge(f *File) {
	c, fc := &r.Config, f.Config
	if f.Defines("network.mode") {
		c.Network.Mode = fc.Network.Mode
	}
	if f.Defines("network.allowed_hosts") {
		r.Allowlist = slices.Clone(f.Hosts)
	}
	if f.Defines("network.ssh_hosts") {
		r.SSHHosts = slices.Clone(f.SSH)
	}
	if f.Defines("network.host_ports") {
		c.Network.HostPorts = fc.Network.HostPorts
	}
	if f.Defines("network.dns") {
		c.Network.DNS = fc.Network.DNS
	}
	if f.Defines("network.ask") {
		c.Network.Ask = fc.Network.Ask
	}
	if f.Defines("network.ask_timeout") {
		c.Network.AskTimeout = fc.Network.AskTimeout
	}
	if f.Defines("network.upstream_ca") {
		c.Network.UpstreamCA = fc.Network.UpstreamCA
	}
	if f.Defines("credentials") {
		c.Credentials = fc.Credentials
	}
	if f.Defines("env.pass") {
		c.Env.Pass = fc.Env.Pass
	}
	for _, k := range sortedKeys(fc.Env.Set) {
		if c.Env.Set == nil {
			c.Env.Set = map[string]string{}
		}
		c.Env.Set[k] = fc.Env.Set[k]
	}
	if f.Defines("limits.pids") {
		c.Limits.Pids = fc.Limits.Pids
	}
	if f.Defines("limits.memory") {
		c.Limits.Memory = fc.Limits.Memory
	}
	if f.Defines("limits.cpus") {
		c.Limits.CPUs = fc.Limits.CPUs
	}
	if f.Defines("sandbox.harness") {
		c.Sandbox.Harness = fc.Sandbox.Harness
	}
	if f.Defines("sandbox.base_image") {
		c.Sandbox.BaseImage = fc.Sandbox.BaseImage
	}
	if f.Defines("sandbox.ssh_agent") {
		c.Sandbox.SSHAgent = fc.Sandbox.SSHAgent
	}
	if f.Defines("sandbox.state") {
		c.Sandbox.State = fc.Sandbox.State
	}
	if f.Defines("logs.session_max") {
		c.Logs.SessionMax = fc.Logs.SessionMax
	}
	if f.Defines("logs.total_max") {
		c.Logs.TotalMax = fc.Logs.TotalMax
	}
}
func (r *Resolved) legacynarrow(f *File) (ignored []widening) {
	ignore := func(field, why string) {
		ignored = append(ignored, widening{field, why})
	}
	c, fc := &r.Config, f.Config
	if f.Defines("network.mode") {
		if fc.Network.Mode.Width() <= c.Network.Mode.Width() {
			if fc.Network.Mode != c.Network.Mode {
				r.Notices = append(r.Notices, fmt.Sprintf("%s: network.mode %q applied: it narrows your %q", f.Name, fc.Network.Mode, c.Network.Mode))
			}
			c.Network.Mode = fc.Network.Mode
		} else {
			ignore("network.mode", fmt.Sprintf("%q is wider than %q", fc.Network.Mode, c.Network.Mode))
		}
	}
	if f.Defines("network.allowed_hosts") {
		kept, dropped := allowlist.Narrow(r.Allowlist, f.Hosts)
		for _, h := range dropped {
			ignore(fmt.Sprintf("network.allowed_hosts %q", h.String()), "a project file cannot add hosts your own configuration does not allow")
		}
		r.Allowlist = kept
	}
	r.legacynarrowSSHHosts(f, ignore)
	// Asking is narrower than allowing (an unlisted name is refused unless
	// the user says yes), so a project may turn it on but never off, and may
	// only shorten the wait.
	if f.Defines("network.ask") {
		if fc.Network.Ask {
			c.Network.Ask = true
		} else if c.Network.Ask {
			ignore("network.ask", "a project file may turn asking on, not off")
		}
	}
	if f.Defines("network.ask_timeout") {
		if time.Duration(fc.Network.AskTimeout)*time.Second <= c.Network.AskWait() {
			c.Network.AskTimeout = fc.Network.AskTimeout
		} else {
			ignore("network.ask_timeout", "a project file may only shorten the wait")
		}
	}
	if f.Defines("network.host_ports") {
		var kept []int
		for _, p := range fc.Network.HostPorts {
			if slices.Contains(c.Network.HostPorts, p) {
				kept = append(kept, p)
			} else {
				ignore(fmt.Sprintf("network.host_ports %d", p), "a project file cannot open host ports your own configuration does not")
			}
		}
		c.Network.HostPorts = kept
	}
	if f.Defines("env.pass") {
		var kept []string
		for _, n := range fc.Env.Pass {
			if slices.Contains(c.Env.Pass, n) {
				kept = append(kept, n)
			} else {
				ignore(fmt.Sprintf("env.pass %q", n), "a project file cannot pass variables your own configuration does not")
			}
		}
		c.Env.Pass = kept
	}
	for _, n := range sortedKeys(fc.Env.Set) {
		ignore("env.set."+keyName(n), "a project file cannot add environment variables")
	}
	if f.Defines("network.dns") {
		ignore("network.dns", "a project file cannot choose the resolvers that decide where allowed names go")
	}
	if f.Defines("sandbox.harness") && fc.Sandbox.Harness != c.Sandbox.Harness {
		ignore("sandbox.harness", "a harness brings its own allowed hosts and variables")
	}
	if f.Defines("sandbox.base_image") && fc.Sandbox.BaseImage != c.Sandbox.BaseImage {
		ignore("sandbox.base_image", "a project file cannot choose the image the sandbox is built from")
	}
	if f.Defines("sandbox.state") {
		// Narrower is fewer sessions sharing one state: a repository may
		// ask for a fresh home, never for the state of other projects.
		if fc.Sandbox.State.width() <= c.Sandbox.State.width() {
			c.Sandbox.State = fc.Sandbox.State
		} else {
			ignore("sandbox.state", fmt.Sprintf("%q is wider than %q: a project file cannot share its state with other projects", fc.Sandbox.State, c.Sandbox.State))
		}
	}
	if f.Defines("limits.pids") {
		if lower(fc.Limits.Pids, c.Limits.Pids) {
			c.Limits.Pids = fc.Limits.Pids
		} else {
			ignore("limits.pids", "a project file may only lower limits")
		}
	}
	if f.Defines("limits.memory") {
		want, _ := ParseMemory(fc.Limits.Memory)
		have, _ := ParseMemory(c.Limits.Memory) // 0 when unset
		if lower(want, have) {
			c.Limits.Memory = fc.Limits.Memory
		} else {
			ignore("limits.memory", "a project file may only lower limits")
		}
	}
	if f.Defines("limits.cpus") {
		if lower(fc.Limits.CPUs, c.Limits.CPUs) {
			c.Limits.CPUs = fc.Limits.CPUs
		} else {
			ignore("limits.cpus", "a project file may only lower limits")
		}
	}
	for _, key := range []string{"logs.session_max", "logs.total_max"} {
		if f.Defines(key) {
			ignore(key, "a project file cannot change what the audit keeps; set it in your own configuration")
		}
	}
	return ignored
}
func (r *Resolved) legacyApply(o Overrides) error {
	var ps Problems
	bad := func(flag, format string, args ...any) {
		ps = append(ps, Problem{File: "command line", Field: flag, Msg: fmt.Sprintf(format, args...)})
	}
	c := &r.Config
	if o.Mode != "" {
		if m := contract.Mode(o.Mode); !m.Valid() {
			bad("--net", "%q is not a mode; write one of %s", o.Mode, modeList())
		} else {
			c.Network.Mode = m
		}
	}
	for _, a := range o.Allow {
		h, err := allowlist.ParseHost(a)
		if err != nil {
			bad("--allow", "%v", err)
			continue
		}
		// A wider --allow replaces the entries it covers.
		r.Allowlist = allowlist.Add(r.Allowlist, h)
	}
	for _, a := range o.AllowSSH {
		if err := r.addSSHHost(a); err != nil {
			bad("--allow-ssh", "%v", err)
		}
	}
	if o.SSHAgent {
		c.Sandbox.SSHAgent = true
	}
	for _, p := range o.HostPorts {
		if p < 1 || p > 65535 {
			bad("--host-port", "%d is not a TCP port; write a number from 1 to 65535", p)
		} else if !slices.Contains(c.Network.HostPorts, p) {
			c.Network.HostPorts = append(c.Network.HostPorts, p)
		}
	}
	for _, e := range o.Env {
		name, value, hasValue := strings.Cut(e, "=")
		if msg := CheckEnvName(name); msg != "" {
			bad("--env", "%s", msg)
			continue
		}
		if hasValue {
			if c.Env.Set == nil {
				c.Env.Set = map[string]string{}
			}
			c.Env.Set[name] = value
		} else if !slices.Contains(c.Env.Pass, name) {
			c.Env.Pass = append(c.Env.Pass, name)
		}
	}
	if o.Harness != "" {
		c.Sandbox.Harness = o.Harness
		f := &File{Name: "command line", Config: Config{Sandbox: Sandbox{Harness: o.Harness}}, defined: map[string]bool{"sandbox.harness": true}}
		for _, p := range checkHarness(f) {
			p.Field = "--harness"
			ps = append(ps, p)
		}
	}
	if o.Ask {
		c.Network.Ask = true
	}
	if o.BaseImage != "" {
		c.Sandbox.BaseImage = o.BaseImage
	}
	if o.State != "" {
		if s, err := ParseStateScope(o.State); err != nil {
			bad("--state", "%v", err)
		} else {
			c.Sandbox.State = s
		}
	}
	if o.Pids < 0 {
		bad("--pids", "%d is negative", o.Pids)
	} else if o.Pids > 0 {
		c.Limits.Pids = o.Pids
	}
	if o.Memory != "" {
		if _, err := ParseMemory(o.Memory); err != nil {
			bad("--memory", "%v", err)
		} else {
			c.Limits.Memory = o.Memory
		}
	}
	if o.CPUs < 0 {
		bad("--cpus", "%g is negative", o.CPUs)
	} else if o.CPUs > 0 && o.CPUs < MinCPUs {
		bad("--cpus", "%s", cpusTooSmall(o.CPUs))
	} else if o.CPUs > 0 {
		c.Limits.CPUs = o.CPUs
	}
	for _, n := range o.Credentials {
		if msg, ok := r.credentialFlag(n); !ok {
			bad("--credential", "%s", msg)
		}
	}
	if len(ps) > 0 {
		return ps
	}
	if ps := r.joinCredentials(); len(ps) > 0 {
		return ps
	}
	return nil
}
func (r *Resolved) legacynarrowSSHHosts(f *File, ignore func(field, why string)) {
	if !f.Defines("network.ssh_hosts") {
		return
	}
	kept, dropped := allowlist.Narrow(r.SSHHosts, f.SSH)
	for _, h := range dropped {
		ignore(fmt.Sprintf("network.ssh_hosts %q", h.String()), "a project file cannot add SSH hosts your own configuration does not list")
	}
	r.SSHHosts = kept
}
func (r *Resolved) legacykeepAgentOff(f *File, before bool) {
	if !f.Defines("sandbox.ssh_agent") {
		return
	}
	if !f.Config.Sandbox.SSHAgent {
		r.Config.Sandbox.SSHAgent = false
		return
	}
	r.Config.Sandbox.SSHAgent = before
	if !before {
		r.Notices = append(r.Notices, fmt.Sprintf("%s: sandbox.ssh_agent ignored: a project file can never forward your ssh-agent; use --ssh-agent or sandbox.ssh_agent in your own configuration", f.Name))
	}
}
func legacyrefuseProjectSecrets(f *File, userFile string) error {
	var ps Problems
	if f.Defines("credentials") {
		ps = append(ps, f.problem("credentials", "a project's %s can never add or change credentials, trusted or not; put them in your own configuration (%s)", ProjectFileName, userFile))
	}
	if f.Defines("network.upstream_ca") {
		ps = append(ps, f.problem("network.upstream_ca", "a project's %s can never choose the CAs the gate trusts for credential hosts; put them in your own configuration (%s)", ProjectFileName, userFile))
	}
	if len(ps) > 0 {
		return ps
	}
	return nil
}

// so one run reports everything wrong with the file at once.
var legacyChecks = []struct {
	name string
	fn   func(f *File) []Problem
}{
	{"version", checkVersion},
	{"network.mode", checkMode},
	{"network.allowed_hosts", checkAllowedHosts},
	{"network.ssh_hosts", checkSSHHosts},
	{"network.host_ports", checkHostPorts},
	{"network.dns", checkDNS},
	{"network.ask_timeout", checkAskTimeout},
	{"network.upstream_ca", checkUpstreamCA},
	{"credentials", checkCredentials},
	{"env.pass", checkEnvPass},
	{"env.set", checkEnvSet},
	{"limits", legacycheckLimits},
	{"sandbox.harness", checkHarness},
	{"sandbox.base_image", checkBaseImage},
	{"logs", legacycheckLogs},
	{"sandbox.state", checkState},
}

func legacyvalidate(f *File) []Problem {
	var ps []Problem
	for _, c := range legacyChecks {
		ps = append(ps, c.fn(f)...)
	}
	return ps
}
func legacycheckLimits(f *File) []Problem {
	var ps []Problem
	l := f.Config.Limits
	if l.Pids < 0 {
		ps = append(ps, f.problem("limits.pids", "%d is negative; write a positive number of processes, or leave it out for no limit", l.Pids))
	}
	if l.Memory != "" {
		if _, err := ParseMemory(l.Memory); err != nil {
			ps = append(ps, f.problem("limits.memory", "%v", err))
		}
	}
	if l.CPUs < 0 {
		ps = append(ps, f.problem("limits.cpus", "%g is negative; write a positive number such as 1.5, or leave it out for no limit", l.CPUs))
	} else if l.CPUs > 0 && l.CPUs < MinCPUs {
		ps = append(ps, f.problem("limits.cpus", "%s", cpusTooSmall(l.CPUs)))
	}
	return ps
}
func legacycheckLogs(f *File) []Problem {
	var ps []Problem
	for key, v := range map[string]string{"logs.session_max": f.Config.Logs.SessionMax, "logs.total_max": f.Config.Logs.TotalMax} {
		if !f.Defines(key) {
			continue
		}
		if n, err := ParseMemory(v); err != nil {
			ps = append(ps, f.problem(key, "%v", err))
		} else if n < 4096 {
			ps = append(ps, f.problem(key, "%q is below 4k, too small for an audit; write a size such as \"64m\"", v))
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Field < ps[j].Field })
	return ps
}

// Parse decodes content strictly and validates every field. name is used in
// messages. The error is a Problems listing everything wrong.
func legacyParse(name string, content []byte) (*File, error) {
	var c Config
	md, err := toml.NewDecoder(bytes.NewReader(content)).Decode(&c)
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return nil, Problems{{File: fmt.Sprintf("%s:%d", name, perr.Position.Line), Msg: perr.Message + "; fix the TOML syntax"}}
		}
		return nil, Problems{{File: name, Msg: strings.TrimPrefix(err.Error(), "toml: ")}}
	}
	f := &File{Name: name, Content: content, Config: c, defined: map[string]bool{}}
	var ps Problems
	for _, k := range md.Keys() {
		f.defined[k.String()] = true
	}
	for _, k := range md.Undecoded() {
		ps = append(ps, legacyunknownKey(name, k))
	}
	ps = append(ps, legacyvalidate(f)...)
	if len(ps) > 0 {
		return nil, ps
	}
	return f, nil
}

var legacyknownKeys = map[string][]string{
	"":            {"version", "network", "env", "limits", "sandbox", "logs", "credentials"},
	"logs":        {"session_max", "total_max"},
	"network":     {"mode", "allowed_hosts", "ssh_hosts", "host_ports", "dns", "ask", "ask_timeout", "upstream_ca"},
	"credentials": credentialKeys,
	"env":         {"pass", "set"},
	"limits":      {"pids", "memory", "cpus"},
	"sandbox":     {"harness", "base_image", "ssh_agent", "state"},
}

func legacyunknownKey(name string, k toml.Key) Problem {
	parent := ""
	if len(k) > 1 {
		parent = strings.Join(k[:len(k)-1], ".")
	}
	if known, ok := legacyknownKeys[parent]; ok {
		where := "at the top level"
		if parent != "" {
			where = "in [" + parent + "]"
		}
		return Problem{File: name, Field: k.String(), Msg: fmt.Sprintf("unknown key; the keys %s are %s", where, strings.Join(known, ", "))}
	}
	return Problem{File: name, Field: k.String(), Msg: "unknown key; remove it"}
}

func legacyReadFile(path string) (*File, error) {
	b, err := safefile.ReadFollow(path, MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return legacyParse(path, b)
}

func legacyReadProjectFile(path string) (*File, error) {
	b, err := safefile.Read(path, MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("read config: %w; make it a plain file or remove it", err)
	}
	return legacyParse(path, b)
}
