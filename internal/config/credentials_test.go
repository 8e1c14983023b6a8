package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestCredentialsParse(t *testing.T) {
	f, err := Parse("config.toml", []byte(`version = 1
[network]
upstream_ca = ["/etc/corp-ca.pem"]
[[credentials]]
host = "api.anthropic.com"
header = "x-api-key"
env = "ANTHROPIC_API_KEY"
[[credentials]]
host = "api.openai.com"
header = "authorization"
env = "OPENAI_API_KEY"
prefix = "Bearer "
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Config.Credentials) != 2 || f.Config.Credentials[1].Prefix != "Bearer " || f.Config.Network.UpstreamCA[0] != "/etc/corp-ca.pem" {
		t.Errorf("decoded %+v", f.Config)
	}
	for body, want := range map[string]string{
		`host = ".anthropic.com"` + "\nheader = \"x-api-key\"\nenv = \"K\"":                "credentials[0].host",
		`host = "192.0.2.7"` + "\nheader = \"x-api-key\"\nenv = \"K\"":                     "credentials[0].host",
		`host = "a.example"` + "\nheader = \"x api\"\nenv = \"K\"":                         "credentials[0].header",
		`host = "a.example"` + "\nheader = \"x-api-key\"":                                  "credentials[0].env",
		`host = "a.example"` + "\nheader = \"x-api-key\"\nenv = \"HTTPS_PROXY\"":           "credentials[0].env",
		`host = "a.example"` + "\nheader = \"x-api-key\"\nenv = \"K\"\nprefix = \"B\\\"\"": "credentials[0].prefix",
		`host = "a.example"` + "\nheader = \"x-api-key\"\nenv = \"K\"\nvalue = \"sk\"":     "credentials.value: unknown key",
	} {
		_, err := Parse("c.toml", []byte("version = 1\n[[credentials]]\n"+body+"\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
	_, err = Parse("c.toml", []byte("version = 1\n[network]\nupstream_ca = [\"relative.pem\"]\n"))
	if err == nil || !strings.Contains(err.Error(), "network.upstream_ca[0]") {
		t.Errorf("relative upstream_ca: %v", err)
	}
}

// TestProjectCannotAddCredentials: a project file, trusted or not, is
// refused when it names credentials or upstream CAs.
func TestProjectCannotAddCredentials(t *testing.T) {
	for _, body := range []string{
		"version = 1\n[[credentials]]\nhost = \"evil.example\"\nheader = \"x-api-key\"\nenv = \"ANTHROPIC_API_KEY\"\n",
		"version = 1\n[network]\nupstream_ca = [\"/tmp/evil.pem\"]\n",
	} {
		for _, trusted := range []bool{false, true} {
			dir := t.TempDir()
			src := Sources{UserFile: filepath.Join(dir, "user.toml"), ProjectDir: filepath.Join(dir, "proj"), TrustFile: filepath.Join(dir, "trusted")}
			path := filepath.Join(src.ProjectDir, ProjectFileName)
			writeFile(t, path, body)
			if trusted {
				if err := Trust(src.TrustFile, path, []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Resolve(src)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "can never") {
				t.Errorf("trusted=%v %q: %v", trusted, body, err)
			}
		}
	}
}

func TestCredentialFlag(t *testing.T) {
	r := &Resolved{Config: Default()}
	if err := r.Apply(Overrides{Credentials: []string{"OPENAI_API_KEY"}}); err != nil {
		t.Fatal(err)
	}
	c := r.Config.Credentials
	if len(c) != 1 || c[0].Host != "api.openai.com" || c[0].Header != "authorization" || c[0].Prefix != "Bearer " {
		t.Errorf("credentials %+v", c)
	}
	if len(r.Allowlist) != 1 || r.Allowlist[0].String() != "api.openai.com" {
		t.Errorf("the credential host is not allowed: %v", r.Allowlist)
	}
	for _, o := range []Overrides{
		{Credentials: []string{"UNKNOWN_KEY"}},
		{Credentials: []string{"ANTHROPIC_API_KEY"}, Env: []string{"ANTHROPIC_API_KEY"}},
		{Credentials: []string{"ANTHROPIC_API_KEY"}, Env: []string{"ANTHROPIC_API_KEY=x"}},
	} {
		r := &Resolved{Config: Default()}
		if err := r.Apply(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("Apply(%+v) = %v", o, err)
		}
	}
}
