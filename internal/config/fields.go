package config

// This file is long because it is the one place each key's rules live:
// how a file's value is checked, merged, narrowed for an untrusted project
// and set from the command line. A new key is one entry here, in the
// order Config declares it (TestFieldsCoverConfig fails otherwise).

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/allowlist"
)

// field is one key of the configuration and every rule aisb has for it.
// Validation, merging, narrowing and the command line each walk fields in
// order, so their messages come in that order.
type field struct {
	key string // dotted, as in a file: "network.mode"
	// check validates a file's value and says everything wrong with it.
	// nil: every value the decoder accepts is valid.
	check func(f *File) []Problem
	// merge lays the file's value, if it sets one, over r: for the user's
	// file and a trusted project's. nil: the key is not merged.
	merge func(r *Resolved, f *File)
	// narrow applies an untrusted project file's value: whoever wrote the
	// repository may take reach away from the sandbox, never give it more;
	// what it refuses goes to n.ignore. nil: the value is dropped silently.
	narrow func(r *Resolved, f *File, n *narrowing)
	// narrowTrusted: a trusted project file is narrowed too, never merged.
	narrowTrusted bool
	// userOnly completes "a project's .aisb.toml can never …": a project
	// file that sets the key is refused, trusted or not.
	userOnly string
	// flag is the command-line flag, and apply lays it over r; bad reports
	// a problem named by flag. nil: no flag sets the key.
	flag  string
	apply func(r *Resolved, o Overrides, bad func(format string, args ...any))
}

// narrowing collects, in the order of fields, what narrowing a project file
// said: widenings it ignored and narrowings it applied.
type narrowing struct {
	f    *File
	said []said
}

// said is a widening that was ignored, or (ignored nil) a notice.
type said struct {
	ignored *widening
	notice  string
}

// widening is one thing an untrusted project file asked for and did not get.
type widening struct {
	field string // with the value, e.g. network.allowed_hosts "x.example"
	why   string
}

func (n *narrowing) ignore(field, why string) {
	n.said = append(n.said, said{ignored: &widening{field, why}})
}

// notice is a message about the project file, prefixed with its name.
func (n *narrowing) notice(format string, args ...any) {
	n.said = append(n.said, said{notice: n.f.Name + ": " + fmt.Sprintf(format, args...)})
}

var fields = []field{
	{
		key:   "version",
		check: checkVersion,
	},

	// [network]
	{
		key:   "network.mode",
		check: checkMode,
		merge: func(r *Resolved, f *File) {
			if f.Defines("network.mode") {
				r.Config.Network.Mode = f.Config.Network.Mode
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("network.mode") {
				return
			}
			want, have := f.Config.Network.Mode, r.Config.Network.Mode
			if want.Width() > have.Width() {
				n.ignore("network.mode", fmt.Sprintf("%q is wider than %q", want, have))
				return
			}
			if want != have {
				n.notice("network.mode %q applied: it narrows your %q", want, have)
			}
			r.Config.Network.Mode = want
		},
		flag: "--net",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			if o.Mode == "" {
				return
			}
			if m := contract.Mode(o.Mode); !m.Valid() {
				bad("%q is not a mode; write one of %s", o.Mode, modeList())
			} else {
				r.Config.Network.Mode = m
			}
		},
	},
	{
		key:   "network.allowed_hosts",
		check: checkAllowedHosts,
		merge: func(r *Resolved, f *File) {
			if f.Defines("network.allowed_hosts") {
				r.Allowlist = slices.Clone(f.Hosts)
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("network.allowed_hosts") {
				return
			}
			kept, dropped := allowlist.Narrow(r.Allowlist, f.Hosts)
			for _, h := range dropped {
				n.ignore(fmt.Sprintf("network.allowed_hosts %q", h.String()), "a project file cannot add hosts your own configuration does not allow")
			}
			r.Allowlist = kept
		},
		flag: "--allow",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			for _, a := range o.Allow {
				h, err := allowlist.ParseHost(a)
				if err != nil {
					bad("%v", err)
					continue
				}
				// A wider --allow replaces the entries it covers.
				r.Allowlist = allowlist.Add(r.Allowlist, h)
			}
		},
	},
	{
		key:   "network.ssh_hosts",
		check: checkSSHHosts,
		merge: func(r *Resolved, f *File) {
			if f.Defines("network.ssh_hosts") {
				r.SSHHosts = slices.Clone(f.SSH)
			}
		},
		// Only what the user's own configuration already lists.
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("network.ssh_hosts") {
				return
			}
			kept, dropped := allowlist.Narrow(r.SSHHosts, f.SSH)
			for _, h := range dropped {
				n.ignore(fmt.Sprintf("network.ssh_hosts %q", h.String()), "a project file cannot add SSH hosts your own configuration does not list")
			}
			r.SSHHosts = kept
		},
		flag: "--allow-ssh",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			for _, a := range o.AllowSSH {
				if err := r.addSSHHost(a); err != nil {
					bad("%v", err)
				}
			}
		},
	},
	{
		key:   "network.host_ports",
		check: checkHostPorts,
		merge: func(r *Resolved, f *File) {
			if f.Defines("network.host_ports") {
				r.Config.Network.HostPorts = f.Config.Network.HostPorts
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("network.host_ports") {
				return
			}
			var kept []int
			for _, p := range f.Config.Network.HostPorts {
				if slices.Contains(r.Config.Network.HostPorts, p) {
					kept = append(kept, p)
				} else {
					n.ignore(fmt.Sprintf("network.host_ports %d", p), "a project file cannot open host ports your own configuration does not")
				}
			}
			r.Config.Network.HostPorts = kept
		},
		flag: "--host-port",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			c := &r.Config
			for _, p := range o.HostPorts {
				if p < 1 || p > 65535 {
					bad("%d is not a TCP port; write a number from 1 to 65535", p)
				} else if !slices.Contains(c.Network.HostPorts, p) {
					c.Network.HostPorts = append(c.Network.HostPorts, p)
				}
			}
		},
	},
	{
		key:   "network.dns",
		check: checkDNS,
		merge: func(r *Resolved, f *File) {
			if f.Defines("network.dns") {
				r.Config.Network.DNS = f.Config.Network.DNS
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if f.Defines("network.dns") {
				n.ignore("network.dns", "a project file cannot choose the resolvers that decide where allowed names go")
			}
		},
	},
	// Asking is narrower than allowing (an unlisted name is refused unless
	// the user says yes), so a project may turn it on but never off, and may
	// only shorten the wait.
	{
		key: "network.ask",
		merge: func(r *Resolved, f *File) {
			if f.Defines("network.ask") {
				r.Config.Network.Ask = f.Config.Network.Ask
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("network.ask") {
				return
			}
			if f.Config.Network.Ask {
				r.Config.Network.Ask = true
			} else if r.Config.Network.Ask {
				n.ignore("network.ask", "a project file may turn asking on, not off")
			}
		},
		flag: "--ask",
		apply: func(r *Resolved, o Overrides, _ func(string, ...any)) {
			if o.Ask {
				r.Config.Network.Ask = true
			}
		},
	},
	{
		key:   "network.ask_timeout",
		check: checkAskTimeout,
		merge: func(r *Resolved, f *File) {
			if f.Defines("network.ask_timeout") {
				r.Config.Network.AskTimeout = f.Config.Network.AskTimeout
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("network.ask_timeout") {
				return
			}
			if time.Duration(f.Config.Network.AskTimeout)*time.Second <= r.Config.Network.AskWait() {
				r.Config.Network.AskTimeout = f.Config.Network.AskTimeout
			} else {
				n.ignore("network.ask_timeout", "a project file may only shorten the wait")
			}
		},
	},
	{
		key:   "network.upstream_ca",
		check: checkUpstreamCA,
		merge: func(r *Resolved, f *File) {
			if f.Defines("network.upstream_ca") {
				r.Config.Network.UpstreamCA = f.Config.Network.UpstreamCA
			}
		},
		// Whoever wrote the repository would choose whom the gate believes
		// to be a credential host.
		userOnly: "choose the CAs the gate trusts for credential hosts",
	},

	// [env]
	{
		key:   "env.pass",
		check: checkEnvPass,
		merge: func(r *Resolved, f *File) {
			if f.Defines("env.pass") {
				r.Config.Env.Pass = f.Config.Env.Pass
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("env.pass") {
				return
			}
			var kept []string
			for _, name := range f.Config.Env.Pass {
				if slices.Contains(r.Config.Env.Pass, name) {
					kept = append(kept, name)
				} else {
					n.ignore(fmt.Sprintf("env.pass %q", name), "a project file cannot pass variables your own configuration does not")
				}
			}
			r.Config.Env.Pass = kept
		},
		// --env NAME passes the variable; --env NAME=VALUE sets it (env.set).
		flag: "--env",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			c := &r.Config
			for _, e := range o.Env {
				name, value, hasValue := strings.Cut(e, "=")
				if msg := CheckEnvName(name); msg != "" {
					bad("%s", msg)
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
		},
	},
	{
		key:   "env.set",
		check: checkEnvSet,
		// Each variable the file sets replaces the one set before.
		merge: func(r *Resolved, f *File) {
			c := &r.Config
			for _, k := range sortedKeys(f.Config.Env.Set) {
				if c.Env.Set == nil {
					c.Env.Set = map[string]string{}
				}
				c.Env.Set[k] = f.Config.Env.Set[k]
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			for _, name := range sortedKeys(f.Config.Env.Set) {
				n.ignore("env.set."+keyName(name), "a project file cannot add environment variables")
			}
		},
		// Set by --env NAME=VALUE: see env.pass.
	},

	// [limits]: zero is no limit, so a project may only lower a set limit
	// and set one where there is none.
	{
		key:   "limits.pids",
		check: checkPids,
		merge: func(r *Resolved, f *File) {
			if f.Defines("limits.pids") {
				r.Config.Limits.Pids = f.Config.Limits.Pids
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("limits.pids") {
				return
			}
			if lower(f.Config.Limits.Pids, r.Config.Limits.Pids) {
				r.Config.Limits.Pids = f.Config.Limits.Pids
			} else {
				n.ignore("limits.pids", "a project file may only lower limits")
			}
		},
		flag: "--pids",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			if o.Pids < 0 {
				bad("%d is negative", o.Pids)
			} else if o.Pids > 0 {
				r.Config.Limits.Pids = o.Pids
			}
		},
	},
	{
		key:   "limits.memory",
		check: checkMemory,
		merge: func(r *Resolved, f *File) {
			if f.Defines("limits.memory") {
				r.Config.Limits.Memory = f.Config.Limits.Memory
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("limits.memory") {
				return
			}
			want, _ := ParseMemory(f.Config.Limits.Memory)
			have, _ := ParseMemory(r.Config.Limits.Memory) // 0 when unset
			if lower(want, have) {
				r.Config.Limits.Memory = f.Config.Limits.Memory
			} else {
				n.ignore("limits.memory", "a project file may only lower limits")
			}
		},
		flag: "--memory",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			if o.Memory == "" {
				return
			}
			if _, err := ParseMemory(o.Memory); err != nil {
				bad("%v", err)
			} else {
				r.Config.Limits.Memory = o.Memory
			}
		},
	},
	{
		key:   "limits.cpus",
		check: checkCPUs,
		merge: func(r *Resolved, f *File) {
			if f.Defines("limits.cpus") {
				r.Config.Limits.CPUs = f.Config.Limits.CPUs
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("limits.cpus") {
				return
			}
			if lower(f.Config.Limits.CPUs, r.Config.Limits.CPUs) {
				r.Config.Limits.CPUs = f.Config.Limits.CPUs
			} else {
				n.ignore("limits.cpus", "a project file may only lower limits")
			}
		},
		flag: "--cpus",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			switch {
			case o.CPUs < 0:
				bad("%g is negative", o.CPUs)
			case o.CPUs > 0 && o.CPUs < MinCPUs:
				bad("%s", cpusTooSmall(o.CPUs))
			case o.CPUs > 0:
				r.Config.Limits.CPUs = o.CPUs
			}
		},
	},

	// [sandbox]
	{
		key:   "sandbox.harness",
		check: checkHarness,
		merge: func(r *Resolved, f *File) {
			if f.Defines("sandbox.harness") {
				r.Config.Sandbox.Harness = f.Config.Sandbox.Harness
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if f.Defines("sandbox.harness") && f.Config.Sandbox.Harness != r.Config.Sandbox.Harness {
				n.ignore("sandbox.harness", "a harness brings its own allowed hosts and variables")
			}
		},
		flag: "--harness",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			if o.Harness == "" {
				return
			}
			r.Config.Sandbox.Harness = o.Harness
			f := &File{Name: "command line", Config: Config{Sandbox: Sandbox{Harness: o.Harness}}, defined: map[string]bool{"sandbox.harness": true}}
			for _, p := range checkHarness(f) {
				bad("%s", p.Msg)
			}
		},
	},
	{
		key:   "sandbox.base_image",
		check: checkBaseImage,
		merge: func(r *Resolved, f *File) {
			if f.Defines("sandbox.base_image") {
				r.Config.Sandbox.BaseImage = f.Config.Sandbox.BaseImage
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if f.Defines("sandbox.base_image") && f.Config.Sandbox.BaseImage != r.Config.Sandbox.BaseImage {
				n.ignore("sandbox.base_image", "a project file cannot choose the image the sandbox is built from")
			}
		},
		flag: "--base-image",
		apply: func(r *Resolved, o Overrides, _ func(string, ...any)) {
			if o.BaseImage != "" {
				r.Config.Sandbox.BaseImage = o.BaseImage
			}
		},
	},
	// A forwarded agent lets the sandbox sign as you for every host the
	// gate admits, so only you can ask for it (your own file or
	// --ssh-agent): a project file, trusted or not, may turn it off only.
	{
		key: "sandbox.ssh_agent",
		merge: func(r *Resolved, f *File) {
			if f.Defines("sandbox.ssh_agent") {
				r.Config.Sandbox.SSHAgent = f.Config.Sandbox.SSHAgent
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("sandbox.ssh_agent") {
				return
			}
			if !f.Config.Sandbox.SSHAgent {
				r.Config.Sandbox.SSHAgent = false
			} else if !r.Config.Sandbox.SSHAgent {
				n.notice("sandbox.ssh_agent ignored: a project file can never forward your ssh-agent; use --ssh-agent or sandbox.ssh_agent in your own configuration")
			}
		},
		narrowTrusted: true,
		flag:          "--ssh-agent",
		apply: func(r *Resolved, o Overrides, _ func(string, ...any)) {
			if o.SSHAgent {
				r.Config.Sandbox.SSHAgent = true
			}
		},
	},
	{
		key:   "sandbox.state",
		check: checkState,
		merge: func(r *Resolved, f *File) {
			if f.Defines("sandbox.state") {
				r.Config.Sandbox.State = f.Config.Sandbox.State
			}
		},
		// Narrower is fewer sessions sharing one state: a repository may
		// ask for a fresh home, never for the state of other projects.
		narrow: func(r *Resolved, f *File, n *narrowing) {
			if !f.Defines("sandbox.state") {
				return
			}
			want, have := f.Config.Sandbox.State, r.Config.Sandbox.State
			if want.width() <= have.width() {
				r.Config.Sandbox.State = want
			} else {
				n.ignore("sandbox.state", fmt.Sprintf("%q is wider than %q: a project file cannot share its state with other projects", want, have))
			}
		},
		flag: "--state",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			if o.State == "" {
				return
			}
			if s, err := ParseStateScope(o.State); err != nil {
				bad("%v", err)
			} else {
				r.Config.Sandbox.State = s
			}
		},
	},

	// [logs]
	{
		key: "logs.session_max",
		check: func(f *File) []Problem {
			return checkLogSize(f, "logs.session_max", f.Config.Logs.SessionMax)
		},
		merge: func(r *Resolved, f *File) {
			if f.Defines("logs.session_max") {
				r.Config.Logs.SessionMax = f.Config.Logs.SessionMax
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) { ignoreLogs(f, n, "logs.session_max") },
	},
	{
		key: "logs.total_max",
		check: func(f *File) []Problem {
			return checkLogSize(f, "logs.total_max", f.Config.Logs.TotalMax)
		},
		merge: func(r *Resolved, f *File) {
			if f.Defines("logs.total_max") {
				r.Config.Logs.TotalMax = f.Config.Logs.TotalMax
			}
		},
		narrow: func(r *Resolved, f *File, n *narrowing) { ignoreLogs(f, n, "logs.total_max") },
	},

	// [[credentials]]
	{
		key:   "credentials",
		check: checkCredentials,
		merge: func(r *Resolved, f *File) {
			if f.Defines("credentials") {
				r.Config.Credentials = f.Config.Credentials
			}
		},
		// Whoever wrote the repository would choose where the user's keys go.
		userOnly: "add or change credentials, trusted or not",
		flag:     "--credential",
		apply: func(r *Resolved, o Overrides, bad func(string, ...any)) {
			for _, name := range o.Credentials {
				if msg, ok := r.credentialFlag(name); !ok {
					bad("%s", msg)
				}
			}
		},
	},
}

// ignoreLogs: what the audit keeps is the user's choice alone.
func ignoreLogs(f *File, n *narrowing, key string) {
	if f.Defines(key) {
		n.ignore(key, "a project file cannot change what the audit keeps; set it in your own configuration")
	}
}

// lower reports whether limit want is at least as tight as have (0 = no limit).
func lower[T int | int64 | float64](want, have T) bool {
	if want == 0 {
		return have == 0
	}
	return have == 0 || want <= have
}

// knownKeys are the keys of each table, for the unknown-key problem: "" is
// the top level.
func knownKeys() map[string][]string {
	known := map[string][]string{"credentials": credentialKeys}
	for _, fd := range fields {
		table, key, ok := strings.Cut(fd.key, ".")
		if !ok {
			known[""] = append(known[""], fd.key)
			continue
		}
		if !slices.Contains(known[""], table) {
			known[""] = append(known[""], table)
		}
		known[table] = append(known[table], key)
	}
	return known
}
