package config

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

// ProjectFileName is the project's own configuration, in the project directory.
const ProjectFileName = ".aisb.toml"

// Sources names where configuration comes from, lowest precedence first.
type Sources struct {
	UserFile   string // the user's file; a missing file is the defaults
	ProjectDir string // the project directory; its .aisb.toml may be missing
	TrustFile  string // the store `aisb trust` writes
}

// Resolved is the effective configuration and how it came to be.
type Resolved struct {
	Config Config // Network.AllowedHosts is empty: the list is Allowlist
	// Allowlist is the one allowlist: the files', narrowed or merged, plus
	// --allow, plus (after JoinHarness) the harness's hosts.
	Allowlist []allowlist.Host
	// SSHHosts are the names SSH may reach on port 22 through the gate.
	SSHHosts []allowlist.Host
	// HarnessHosts are the entries JoinHarness added, for display.
	HarnessHosts []allowlist.Host
	// Notices say what was ignored and why; the CLI prints them on stderr.
	Notices []string
	// ProjectFile is the project's file when there is one (trusted or not).
	ProjectFile *File
}

// Widens lists what the project file f would add to the configuration in
// userFile if it were trusted, one "field value" per entry; nothing when it
// only narrows.
func Widens(userFile string, f *File) ([]string, error) {
	r, err := Resolve(Sources{UserFile: userFile})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range r.narrow(f) {
		out = append(out, w.field)
	}
	return out, nil
}

// Resolve merges the defaults, the user's file and the project's file. A
// project file that the user has not trusted (`aisb trust`) may only narrow:
// what it would widen is ignored with a notice.
func Resolve(src Sources) (*Resolved, error) {
	r := &Resolved{Config: Default()}
	if src.UserFile != "" {
		f, err := ReadFile(src.UserFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			r.merge(f)
		}
	}
	if src.ProjectDir != "" {
		path, err := filepath.Abs(filepath.Join(src.ProjectDir, ProjectFileName))
		if err != nil {
			return nil, err
		}
		f, err := ReadProjectFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			if err := refuseProjectSecrets(f, src.UserFile); err != nil {
				return nil, err
			}
			trusted, err := IsTrusted(src.TrustFile, path, f.Content)
			if err != nil {
				return nil, err
			}
			agent := r.Config.Sandbox.SSHAgent
			r.ProjectFile = f
			if trusted {
				r.merge(f)
			} else {
				for _, w := range r.narrow(f) {
					r.Notices = append(r.Notices, fmt.Sprintf("%s: %s ignored: %s; run `aisb trust` to accept this file as it is", f.Name, w.field, w.why))
				}
			}
			r.keepAgentOff(f, agent)
		}
	}
	return r, nil
}

// merge lays every key the file defines over the configuration.
func (r *Resolved) merge(f *File) {
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

// widening is one thing an untrusted project file asked for and did not get.
type widening struct {
	field string // with the value, e.g. network.allowed_hosts "x.example"
	why   string
}

// narrow applies an untrusted project file: whoever wrote the repository may
// take reach away from the sandbox, never give it more. It returns what it
// ignored; a change of mode it applied becomes a notice.
func (r *Resolved) narrow(f *File) (ignored []widening) {
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
	r.narrowSSHHosts(f, ignore)
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

// lower reports whether limit want is at least as tight as have (0 = no limit).
func lower[T int | int64 | float64](want, have T) bool {
	if want == 0 {
		return have == 0
	}
	return have == 0 || want <= have
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
