package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSaveAllowedHost(t *testing.T) {
	cases := []struct{ name, before, after string }{
		{"one line", "version = 1\n[network]\nallowed_hosts = [\"a.test\"] # mine\n[env]\npass = [\"K\"]\n",
			"version = 1\n[network]\nallowed_hosts = [\"a.test\", \"new.test\"] # mine\n[env]\npass = [\"K\"]\n"},
		{"empty", "version = 1\n[network]\nallowed_hosts = []\n", "version = 1\n[network]\nallowed_hosts = [\"new.test\"]\n"},
		{"multi-line with comments", "version = 1\n\n[network]\nmode = \"allow\"\nallowed_hosts = [\n  \"a.test\",  # why [a]\n  \"b.test\", # \"quoted\"\n]\n",
			"version = 1\n\n[network]\nmode = \"allow\"\nallowed_hosts = [\n  \"a.test\",  # why [a]\n  \"b.test\", \"new.test\" # \"quoted\"\n]\n"},
		{"no key", "version = 1\n[network] # net\nmode = \"allow\"\n", "version = 1\n[network] # net\nallowed_hosts = [\"new.test\"]\nmode = \"allow\"\n"},
		{"no table", "version = 1\n[env]\npass = []", "version = 1\n[env]\npass = []\n\n[network]\nallowed_hosts = [\"new.test\"]\n"},
		{"dotted", "version = 1\nnetwork.allowed_hosts = [\"a.test\"]\n", "version = 1\nnetwork.allowed_hosts = [\"a.test\", \"new.test\"]\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.toml")
			os.WriteFile(p, []byte(c.before), 0o640)
			changed, err := SaveAllowedHost(p, "new.test")
			if err != nil || !changed {
				t.Fatalf("save: %v %v", changed, err)
			}
			b, _ := os.ReadFile(p)
			if string(b) != c.after {
				t.Errorf("got\n%s\nwant\n%s", b, c.after)
			}
			if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
				t.Errorf("mode %o, want 640 kept", fi.Mode().Perm())
			}
			if changed, err := SaveAllowedHost(p, "new.test"); changed || err != nil {
				t.Errorf("second save: %v %v", changed, err)
			}
		})
	}
}

func TestSaveAllowedHostRefuses(t *testing.T) {
	dir := t.TempDir()
	inline := filepath.Join(dir, "inline.toml")
	content := "version = 1\nnetwork = { allowed_hosts = [\"a.test\"] }\n"
	os.WriteFile(inline, []byte(content), 0o600)
	if _, err := SaveAllowedHost(inline, "new.test"); !errors.Is(err, ErrCannotEdit) {
		t.Errorf("inline table: %v", err)
	}
	if b, _ := os.ReadFile(inline); string(b) != content {
		t.Errorf("refused edit changed the file: %s", b)
	}
	link := filepath.Join(dir, "link.toml")
	os.Symlink(inline, link)
	if _, err := SaveAllowedHost(link, "new.test"); !errors.Is(err, ErrCannotEdit) {
		t.Errorf("symlink: %v", err)
	}
	if _, err := SaveAllowedHost(inline, "bad host"); err == nil {
		t.Error("a bad host was saved")
	}
	fresh := filepath.Join(dir, "sub", "config.toml")
	if changed, err := SaveAllowedHost(fresh, "new.test"); !changed || err != nil {
		t.Fatalf("new file: %v", err)
	}
	if f, err := ReadFile(fresh); err != nil || len(f.Config.Network.AllowedHosts) != 1 {
		t.Errorf("new file: %v", err)
	}
}
