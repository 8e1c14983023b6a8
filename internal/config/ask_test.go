package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAskProjectMayOnlyNarrow: an untrusted project file may turn asking on
// and shorten its wait, never turn it off or lengthen the wait.
func TestAskProjectMayOnlyNarrow(t *testing.T) {
	cases := []struct {
		user, project string
		ask           bool
		wait          time.Duration
		ignored       string
	}{
		{"", "ask = true\nask_timeout = 5\n", true, 5 * time.Second, ""},
		{"ask = true\n", "ask = false\n", true, 30 * time.Second, "network.ask ignored"},
		{"ask = true\nask_timeout = 10\n", "ask_timeout = 60\n", true, 10 * time.Second, "network.ask_timeout ignored"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		user := filepath.Join(dir, "user.toml")
		os.WriteFile(user, []byte("version = 1\n[network]\n"+c.user), 0o600)
		project := filepath.Join(dir, "project")
		os.Mkdir(project, 0o700)
		os.WriteFile(filepath.Join(project, ProjectFileName), []byte("version = 1\n[network]\n"+c.project), 0o600)
		r, err := Resolve(Sources{UserFile: user, ProjectDir: project, TrustFile: filepath.Join(dir, "trusted")})
		if err != nil {
			t.Fatal(err)
		}
		if r.Config.Network.Ask != c.ask || r.Config.Network.AskWait() != c.wait {
			t.Errorf("user %q project %q: ask %v wait %v", c.user, c.project, r.Config.Network.Ask, r.Config.Network.AskWait())
		}
		if c.ignored != "" && !strings.Contains(strings.Join(r.Notices, "\n"), c.ignored) {
			t.Errorf("user %q project %q: no notice %q in %v", c.user, c.project, c.ignored, r.Notices)
		}
	}
	if _, err := Parse("x.toml", []byte("version = 1\n[network]\nask_timeout = 0\n")); err == nil || !strings.Contains(err.Error(), "network.ask_timeout") {
		t.Errorf("ask_timeout 0: %v", err)
	}
}
