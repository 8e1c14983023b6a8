package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

func hostStrings(hs []allowlist.Host) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.String())
	}
	return out
}

func TestSSHHostsProblems(t *testing.T) {
	for _, c := range []struct{ toml, want string }{
		{`ssh_hosts = ["192.0.2.7"]`, `network.ssh_hosts[0]: "192.0.2.7": SSH goes to host names only, never to an address`},
		{`ssh_hosts = ["git.example", "10.0.0.0/8"]`, `network.ssh_hosts[1]: "10.0.0.0/8": SSH goes to host names only`},
		{`ssh_hosts = ["git.example:22"]`, `network.ssh_hosts[0]: "git.example:22": a port is not allowed`},
		{`ssh_hosts = ["git@github.com"]`, `network.ssh_hosts[0]: "git@github.com"`},
		{`ssh_hosts = [".github.com", "github.com"]`, `network.ssh_hosts[1]: "github.com": listed twice, or covered`},
	} {
		_, err := Parse("config.toml", []byte("version = 1\n[network]\n"+c.toml+"\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "config.toml: "+c.want) {
			t.Errorf("%s: got %v, want %q", c.toml, err, c.want)
		}
	}
	for _, o := range []Overrides{{AllowSSH: []string{"192.0.2.7"}}, {AllowSSH: []string{"ssh://git.example"}}} {
		r := &Resolved{Config: Default()}
		if err := r.Apply(o); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "command line: --allow-ssh: ") {
			t.Errorf("Apply(%+v) = %v", o, err)
		}
	}
	if _, err := Parse("config.toml", []byte("version = 1\n[env]\npass = [\"SSH_AUTH_SOCK\"]\n")); !errors.Is(err, ErrInvalid) {
		t.Errorf("env.pass SSH_AUTH_SOCK accepted: %v", err)
	}
}

func TestSSHOverrides(t *testing.T) {
	r := &Resolved{Config: Default()}
	r.Config.Network.SSHHosts = []string{"git.example.com"}
	if err := r.Apply(Overrides{AllowSSH: []string{".example.com", "github.com", "github.com"}, SSHAgent: true}); err != nil {
		t.Fatal(err)
	}
	if got := hostStrings(r.SSHHosts); !slices.Equal(got, []string{".example.com", "github.com"}) || !r.Config.Sandbox.SSHAgent {
		t.Errorf("ssh hosts %q, agent %v", got, r.Config.Sandbox.SSHAgent)
	}
	if len(r.Allowlist) != 0 {
		t.Errorf("--allow-ssh reached the HTTPS allowlist: %v", r.Allowlist)
	}
}

// TestProjectSSH: an untrusted project file only narrows the SSH list, and no
// project file, trusted or not, turns the agent on; turning it off stands.
func TestProjectSSH(t *testing.T) {
	dir := t.TempDir()
	src := Sources{UserFile: filepath.Join(dir, "user.toml"), ProjectDir: filepath.Join(dir, "proj"), TrustFile: filepath.Join(dir, "trusted")}
	writeFile(t, src.UserFile, "version = 1\n[network]\nssh_hosts = [\".forge.example\", \"github.com\"]\n")
	project := "version = 1\n[network]\nssh_hosts = [\"git.forge.example\", \"evil.example\"]\n[sandbox]\nssh_agent = true\n"
	writeFile(t, filepath.Join(src.ProjectDir, ProjectFileName), project)
	r, err := Resolve(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := hostStrings(r.SSHHosts); !slices.Equal(got, []string{"git.forge.example"}) || r.Config.Sandbox.SSHAgent {
		t.Errorf("untrusted: ssh hosts %q, agent %v", got, r.Config.Sandbox.SSHAgent)
	}
	notices := strings.Join(r.Notices, "\n")
	for _, want := range []string{`network.ssh_hosts "evil.example" ignored`, "sandbox.ssh_agent ignored: a project file can never forward your ssh-agent"} {
		if !strings.Contains(notices, want) {
			t.Errorf("notices lack %q:\n%s", want, notices)
		}
	}

	if err := Trust(src.TrustFile, filepath.Join(src.ProjectDir, ProjectFileName), []byte(project)); err != nil {
		t.Fatal(err)
	}
	r, err = Resolve(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := hostStrings(r.SSHHosts); !slices.Equal(got, []string{"git.forge.example", "evil.example"}) || r.Config.Sandbox.SSHAgent {
		t.Errorf("trusted: ssh hosts %q, agent %v", got, r.Config.Sandbox.SSHAgent)
	}
	if !strings.Contains(strings.Join(r.Notices, "\n"), "sandbox.ssh_agent ignored") {
		t.Errorf("trusted file turned the agent on silently: %q", r.Notices)
	}

	// The user's own agent setting; a project may turn it off.
	writeFile(t, src.UserFile, "version = 1\n[sandbox]\nssh_agent = true\n")
	writeFile(t, filepath.Join(src.ProjectDir, ProjectFileName), "version = 1\n[sandbox]\nssh_agent = false\n")
	if r, err = Resolve(src); err != nil || r.Config.Sandbox.SSHAgent {
		t.Errorf("project could not turn the agent off: %v %+v", err, r)
	}
	writeFile(t, filepath.Join(src.ProjectDir, ProjectFileName), "version = 1\n")
	if r, err = Resolve(src); err != nil || !r.Config.Sandbox.SSHAgent {
		t.Errorf("user's ssh_agent = true lost: %v", err)
	}
}
