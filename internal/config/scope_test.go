package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateScope: the default keeps state per project; an untrusted project
// file may narrow the scope, never widen it; bad values name the field.
func TestStateScope(t *testing.T) {
	cases := []struct{ user, project, want, notice string }{
		{"", "", "project", ""},
		{"", "none", "none", ""},
		{"", "harness", "project", "sandbox.state ignored"},
		{"harness", "project", "project", ""},
		{"harness", "none", "none", ""},
		{"none", "project", "none", "sandbox.state ignored"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		src := Sources{UserFile: filepath.Join(dir, "user.toml"), ProjectDir: filepath.Join(dir, "proj"), TrustFile: filepath.Join(dir, "trusted")}
		user := "version = 1\n"
		if c.user != "" {
			user += "[sandbox]\nstate = \"" + c.user + "\"\n"
		}
		writeFile(t, src.UserFile, user)
		if c.project != "" {
			writeFile(t, filepath.Join(src.ProjectDir, ProjectFileName), "version = 1\n[sandbox]\nstate = \""+c.project+"\"\n")
		}
		r, err := Resolve(src)
		if err != nil {
			t.Fatal(err)
		}
		notices := strings.Join(r.Notices, "\n")
		if string(r.Config.Sandbox.State) != c.want || (c.notice == "") != (notices == "") || !strings.Contains(notices, c.notice) {
			t.Errorf("user %q project %q: state %q notices %q; want %q %q", c.user, c.project, r.Config.Sandbox.State, notices, c.want, c.notice)
		}
	}
	_, err := Parse("f.toml", []byte("version = 1\n[sandbox]\nstate = \"everything\"\n"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "sandbox.state") {
		t.Errorf("bad scope: %v", err)
	}
	r := &Resolved{Config: Default()}
	if err := r.Apply(Overrides{State: "harness"}); err != nil || r.Config.Sandbox.State != StateHarness {
		t.Errorf("--state harness: %v %q", err, r.Config.Sandbox.State)
	}
	if err := r.Apply(Overrides{State: "all"}); err == nil || !strings.Contains(err.Error(), "--state") {
		t.Errorf("--state all: %v", err)
	}
}
