package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// narrowUser is the user's own configuration the narrowing cases start from.
const narrowUser = `version = 1
[network]
mode = "allow"
allowed_hosts = [".github.com", "pypi.org"]
ssh_hosts = ["github.com"]
host_ports = [8080, 9000]
ask_timeout = 60
[env]
pass = ["FOO", "BAR"]
[limits]
pids = 100
memory = "1g"
cpus = 2.0
[sandbox]
harness = "claude"
state = "project"
`

// narrowCase is a project file laid over a user's file: what the
// configuration becomes (summary) and what is said (notices, with the
// project file's path as P), or the error.
type narrowCase struct {
	user    string // "" is narrowUser
	project string // after "version = 1"
	trusted bool
	want    string
	notices []string
	err     string
}

// narrowBase is summary of narrowUser alone.
const narrowBase = `mode=allow allow=[.github.com pypi.org] ssh=[github.com] ports=[8080 9000] dns=[] ask=false ask_timeout=60 ca=[] pass=[FOO BAR] set=map[] pids=100 memory=1g cpus=2 harness=claude image=docker.io/library/debian:trixie-slim agent=false state=project logs=64m/512m credentials=0`

// narrowCases are, key by key, what an untrusted project file may do: only
// narrow what the user's configuration allows, saying what it ignored.
var narrowCases = []narrowCase{
	{project: ``, want: narrowBase},

	// network.mode: narrower applies and is said; wider is ignored.
	{project: "[network]\nmode = \"none\"", want: strings.Replace(narrowBase, "mode=allow", "mode=none", 1),
		notices: []string{`P: network.mode "none" applied: it narrows your "allow"`}},
	{project: "[network]\nmode = \"allow\"", want: narrowBase},
	{project: "[network]\nmode = \"open\"", want: narrowBase,
		notices: []string{`P: network.mode ignored: "open" is wider than "allow"; run ` + "`aisb trust`" + ` to accept this file as it is`}},
	{project: "[network]\nmode = \"no-gate\"", want: narrowBase,
		notices: []string{`P: network.mode ignored: "no-gate" is wider than "allow"; run ` + "`aisb trust`" + ` to accept this file as it is`}},
	{user: "version = 1\n[network]\nmode = \"open\"\n", project: "[network]\nmode = \"no-gate\"",
		want:    `mode=no-gate allow=[] ssh=[] ports=[] dns=[] ask=false ask_timeout=0 ca=[] pass=[] set=map[] pids=0 memory= cpus=0 harness=pi image=docker.io/library/debian:trixie-slim agent=false state=project logs=64m/512m credentials=0`,
		notices: []string{`P: network.mode "no-gate" applied: it narrows your "open"`}},

	// network.allowed_hosts and ssh_hosts: only what the user's list covers.
	{project: "[network]\nallowed_hosts = [\"api.github.com\", \"evil.example\", \"pypi.org\"]",
		want:    strings.Replace(narrowBase, "allow=[.github.com pypi.org]", "allow=[api.github.com pypi.org]", 1),
		notices: []string{`P: network.allowed_hosts "evil.example" ignored: a project file cannot add hosts your own configuration does not allow; run ` + "`aisb trust`" + ` to accept this file as it is`}},
	{project: "[network]\nallowed_hosts = []", want: strings.Replace(narrowBase, "allow=[.github.com pypi.org]", "allow=[]", 1)},
	{project: "[network]\nssh_hosts = [\"github.com\", \"gitlab.com\"]", want: narrowBase,
		notices: []string{`P: network.ssh_hosts "gitlab.com" ignored: a project file cannot add SSH hosts your own configuration does not list; run ` + "`aisb trust`" + ` to accept this file as it is`}},

	// network.host_ports: only ports the user opens.
	{project: "[network]\nhost_ports = [9000, 22]", want: strings.Replace(narrowBase, "ports=[8080 9000]", "ports=[9000]", 1),
		notices: []string{`P: network.host_ports 22 ignored: a project file cannot open host ports your own configuration does not; run ` + "`aisb trust`" + ` to accept this file as it is`}},

	// network.dns: never.
	{project: "[network]\ndns = [\"192.0.2.53\"]", want: narrowBase,
		notices: []string{`P: network.dns ignored: a project file cannot choose the resolvers that decide where allowed names go; run ` + "`aisb trust`" + ` to accept this file as it is`}},

	// network.ask: on, not off; ask_timeout: only shorter.
	{project: "[network]\nask = true", want: strings.Replace(narrowBase, "ask=false", "ask=true", 1)},
	{user: strings.Replace(narrowUser, "ask_timeout = 60", "ask_timeout = 60\nask = true", 1), project: "[network]\nask = false",
		want:    strings.Replace(narrowBase, "ask=false", "ask=true", 1),
		notices: []string{`P: network.ask ignored: a project file may turn asking on, not off; run ` + "`aisb trust`" + ` to accept this file as it is`}},
	{project: "[network]\nask_timeout = 10", want: strings.Replace(narrowBase, "ask_timeout=60", "ask_timeout=10", 1)},
	{project: "[network]\nask_timeout = 61", want: narrowBase,
		notices: []string{`P: network.ask_timeout ignored: a project file may only shorten the wait; run ` + "`aisb trust`" + ` to accept this file as it is`}},
	{user: "version = 1\n", project: "[network]\nask_timeout = 31",
		want:    `mode=allow allow=[] ssh=[] ports=[] dns=[] ask=false ask_timeout=0 ca=[] pass=[] set=map[] pids=0 memory= cpus=0 harness=pi image=docker.io/library/debian:trixie-slim agent=false state=project logs=64m/512m credentials=0`,
		notices: []string{`P: network.ask_timeout ignored: a project file may only shorten the wait; run ` + "`aisb trust`" + ` to accept this file as it is`}},

	// network.upstream_ca and [[credentials]]: refused, trusted or not.
	{project: "[network]\nupstream_ca = [\"/etc/ca.pem\"]", err: `P: network.upstream_ca: a project's .aisb.toml can never choose the CAs the gate trusts for credential hosts; put them in your own configuration (U)`},
	{project: "[network]\nupstream_ca = [\"/etc/ca.pem\"]", trusted: true, err: `P: network.upstream_ca: a project's .aisb.toml can never choose the CAs the gate trusts for credential hosts; put them in your own configuration (U)`},
	{project: "[[credentials]]\nhost = \"api.example.com\"\nheader = \"x-api-key\"\nenv = \"KEY\"", trusted: true,
		err: `P: credentials: a project's .aisb.toml can never add or change credentials, trusted or not; put them in your own configuration (U)`},

	// env.pass: only variables the user passes; env.set: never.
	{project: "[env]\npass = [\"FOO\", \"AWS_SECRET_ACCESS_KEY\"]", want: strings.Replace(narrowBase, "pass=[FOO BAR]", "pass=[FOO]", 1),
		notices: []string{`P: env.pass "AWS_SECRET_ACCESS_KEY" ignored: a project file cannot pass variables your own configuration does not; run ` + "`aisb trust`" + ` to accept this file as it is`}},
	{project: "[env]\nset = { NODE_OPTIONS = \"--require /x\", \"a.b\" = \"y\" }", err: `P: env.set."a.b": "a.b" is not a variable name`},
	{project: "[env]\nset = { NODE_OPTIONS = \"--require /x\", A = \"1\" }", want: narrowBase,
		notices: []string{
			`P: env.set.A ignored: a project file cannot add environment variables; run ` + "`aisb trust`" + ` to accept this file as it is`,
			`P: env.set.NODE_OPTIONS ignored: a project file cannot add environment variables; run ` + "`aisb trust`" + ` to accept this file as it is`}},

	// [limits]: only lower; 0 is no limit, so it never lowers a set one.
	{project: "[limits]\npids = 50\nmemory = \"512m\"\ncpus = 1.5",
		want: strings.Replace(strings.Replace(strings.Replace(narrowBase, "pids=100", "pids=50", 1), "memory=1g", "memory=512m", 1), "cpus=2", "cpus=1.5", 1)},
	{project: "[limits]\npids = 200\nmemory = \"2g\"\ncpus = 4.0", want: narrowBase, notices: []string{
		`P: limits.pids ignored: a project file may only lower limits; run ` + "`aisb trust`" + ` to accept this file as it is`,
		`P: limits.memory ignored: a project file may only lower limits; run ` + "`aisb trust`" + ` to accept this file as it is`,
		`P: limits.cpus ignored: a project file may only lower limits; run ` + "`aisb trust`" + ` to accept this file as it is`}},
	{project: "[limits]\npids = 0\ncpus = 0.0", want: narrowBase, notices: []string{
		`P: limits.pids ignored: a project file may only lower limits; run ` + "`aisb trust`" + ` to accept this file as it is`,
		`P: limits.cpus ignored: a project file may only lower limits; run ` + "`aisb trust`" + ` to accept this file as it is`}},
	{user: "version = 1\n", project: "[limits]\npids = 10\nmemory = \"64m\"\ncpus = 0.5",
		want: `mode=allow allow=[] ssh=[] ports=[] dns=[] ask=false ask_timeout=0 ca=[] pass=[] set=map[] pids=10 memory=64m cpus=0.5 harness=pi image=docker.io/library/debian:trixie-slim agent=false state=project logs=64m/512m credentials=0`},

	// [sandbox]: the same harness and image only; the agent never turned
	// on, trusted or not; the state scope only narrower.
	{project: "[sandbox]\nharness = \"claude\"\nbase_image = \"docker.io/library/debian:trixie-slim\"", want: narrowBase},
	{project: "[sandbox]\nharness = \"pi\"\nbase_image = \"evil.example/debian\"", want: narrowBase, notices: []string{
		`P: sandbox.harness ignored: a harness brings its own allowed hosts and variables; run ` + "`aisb trust`" + ` to accept this file as it is`,
		`P: sandbox.base_image ignored: a project file cannot choose the image the sandbox is built from; run ` + "`aisb trust`" + ` to accept this file as it is`}},
	{project: "[sandbox]\nssh_agent = true", want: narrowBase,
		notices: []string{`P: sandbox.ssh_agent ignored: a project file can never forward your ssh-agent; use --ssh-agent or sandbox.ssh_agent in your own configuration`}},
	{project: "[sandbox]\nssh_agent = true", trusted: true, want: narrowBase,
		notices: []string{`P: sandbox.ssh_agent ignored: a project file can never forward your ssh-agent; use --ssh-agent or sandbox.ssh_agent in your own configuration`}},
	{user: narrowUser + "ssh_agent = true\n", project: "[sandbox]\nssh_agent = true", want: strings.Replace(narrowBase, "agent=false", "agent=true", 1)},
	{user: narrowUser + "ssh_agent = true\n", project: "[sandbox]\nssh_agent = false", want: narrowBase},
	{user: narrowUser + "ssh_agent = true\n", project: "[sandbox]\nssh_agent = false", trusted: true, want: narrowBase},
	{project: "[sandbox]\nstate = \"none\"", want: strings.Replace(narrowBase, "state=project", "state=none", 1)},
	{project: "[sandbox]\nstate = \"harness\"", want: narrowBase,
		notices: []string{`P: sandbox.state ignored: "harness" is wider than "project": a project file cannot share its state with other projects; run ` + "`aisb trust`" + ` to accept this file as it is`}},

	// [logs]: never.
	{project: "[logs]\nsession_max = \"1g\"\ntotal_max = \"8g\"", want: narrowBase, notices: []string{
		`P: logs.session_max ignored: a project file cannot change what the audit keeps; set it in your own configuration; run ` + "`aisb trust`" + ` to accept this file as it is`,
		`P: logs.total_max ignored: a project file cannot change what the audit keeps; set it in your own configuration; run ` + "`aisb trust`" + ` to accept this file as it is`}},

	// A trusted file is merged: it may widen, except the agent.
	{project: "[network]\nmode = \"open\"\ndns = [\"192.0.2.53\"]\n[env]\nset = { A = \"1\" }\n[sandbox]\nharness = \"pi\"\nstate = \"harness\"\n[limits]\npids = 0\n[logs]\ntotal_max = \"1g\"", trusted: true,
		want: `mode=open allow=[.github.com pypi.org] ssh=[github.com] ports=[8080 9000] dns=[192.0.2.53] ask=false ask_timeout=60 ca=[] pass=[FOO BAR] set=map[A:1] pids=0 memory=1g cpus=2 harness=pi image=docker.io/library/debian:trixie-slim agent=false state=harness logs=64m/1g credentials=0`},

	// Several at once: said in the order of the keys in Config.
	{project: "[sandbox]\nssh_agent = true\nstate = \"harness\"\n[logs]\nsession_max = \"1g\"\n[env]\nset = { A = \"1\" }\n[network]\nmode = \"none\"\ndns = []\nhost_ports = [1]",
		want: strings.Replace(strings.Replace(narrowBase, "mode=allow", "mode=none", 1), "ports=[8080 9000]", "ports=[]", 1), notices: []string{
			`P: network.mode "none" applied: it narrows your "allow"`,
			`P: network.host_ports 1 ignored: a project file cannot open host ports your own configuration does not; run ` + "`aisb trust`" + ` to accept this file as it is`,
			`P: network.dns ignored: a project file cannot choose the resolvers that decide where allowed names go; run ` + "`aisb trust`" + ` to accept this file as it is`,
			`P: env.set.A ignored: a project file cannot add environment variables; run ` + "`aisb trust`" + ` to accept this file as it is`,
			`P: sandbox.ssh_agent ignored: a project file can never forward your ssh-agent; use --ssh-agent or sandbox.ssh_agent in your own configuration`,
			`P: sandbox.state ignored: "harness" is wider than "project": a project file cannot share its state with other projects; run ` + "`aisb trust`" + ` to accept this file as it is`,
			`P: logs.session_max ignored: a project file cannot change what the audit keeps; set it in your own configuration; run ` + "`aisb trust`" + ` to accept this file as it is`}},
}

// summary is the resolved configuration on one line, for comparing.
func summary(r *Resolved) string {
	c := r.Config
	hosts := func(r *Resolved, ssh bool) []string {
		l := r.Allowlist
		if ssh {
			l = r.SSHHosts
		}
		var s []string
		for _, h := range l {
			s = append(s, h.String())
		}
		return s
	}
	return fmt.Sprintf("mode=%s allow=%v ssh=%v ports=%v dns=%v ask=%v ask_timeout=%d ca=%v pass=%v set=%v pids=%d memory=%s cpus=%g harness=%s image=%s agent=%v state=%s logs=%s/%s credentials=%d",
		c.Network.Mode, hosts(r, false), hosts(r, true), c.Network.HostPorts, c.Network.DNS, c.Network.Ask, c.Network.AskTimeout, c.Network.UpstreamCA,
		c.Env.Pass, c.Env.Set, c.Limits.Pids, c.Limits.Memory, c.Limits.CPUs, c.Sandbox.Harness, c.Sandbox.BaseImage, c.Sandbox.SSHAgent, c.Sandbox.State,
		c.Logs.SessionMax, c.Logs.TotalMax, len(c.Credentials))
}

// runNarrowCase resolves c with resolve and says how the outcome differs
// from what c wants, or "".
func runNarrowCase(t *testing.T, c narrowCase, resolve func(Sources) (*Resolved, error)) string {
	t.Helper()
	dir := t.TempDir()
	user, proj, store := filepath.Join(dir, "user.toml"), filepath.Join(dir, "proj"), filepath.Join(dir, "trust")
	projFile := filepath.Join(proj, ProjectFileName)
	body := "version = 1\n" + c.project + "\n"
	if c.user == "" {
		c.user = narrowUser
	}
	writeFile(t, user, c.user)
	writeFile(t, projFile, body)
	if c.trusted {
		if err := Trust(store, projFile, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := resolve(Sources{UserFile: user, ProjectDir: proj, TrustFile: store})
	named := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, projFile, "P"), user, "U") }
	if c.err != "" {
		if !errors.Is(err, ErrInvalid) || !strings.Contains(named(err.Error()), c.err) {
			return fmt.Sprintf("error %v, want %q", err, c.err)
		}
		return ""
	}
	if err != nil {
		return fmt.Sprintf("error %v", err)
	}
	var notices []string
	for _, n := range r.Notices {
		notices = append(notices, named(n))
	}
	if got := summary(r); got != c.want || !slices.Equal(notices, c.notices) {
		return fmt.Sprintf("got\n%s\n%q\nwant\n%s\n%q", got, notices, c.want, c.notices)
	}
	return ""
}

// TestNarrowRules: each key's rule for a project file, trusted or not, with
// the exact words said on stderr.
func TestNarrowRules(t *testing.T) {
	for _, c := range narrowCases {
		if msg := runNarrowCase(t, c, Resolve); msg != "" {
			t.Errorf("project %q (trusted %v): %s", c.project, c.trusted, msg)
		}
	}
}
