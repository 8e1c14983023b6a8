package testhost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Aisb is aisb as a user of it runs it, for tests and benchmarks alike: the
// real binary (its entrypoint and gate helper built beside it), run as the
// test user in a project directory of its own, with config and state
// directories of its own.
type Aisb struct {
	Bin     string
	Project string
	Config  string   // XDG_CONFIG_HOME
	State   string   // XDG_STATE_HOME
	Base    string   // AISB_BASE_IMAGE; "" for aisb's default
	Helpers []string // AISB_ENTRYPOINT=…, AISB_GATEHELPER=…
}

// NewAisb builds aisb and its helpers and makes the user's directories,
// owned by the test user and removed when t ends.
func NewAisb(t testing.TB, base string) Aisb {
	t.Helper()
	Require(t)
	return Aisb{
		Bin:     Binary(t, "cmd/aisb"),
		Project: UserDir(t),
		Config:  UserDir(t),
		State:   UserDir(t),
		Base:    base,
		Helpers: []string{"AISB_ENTRYPOINT=" + Binary(t, "cmd/aisb-entrypoint"), "AISB_GATEHELPER=" + Binary(t, "cmd/aisb-gatehelper")},
	}
}

// Argv is the command line that runs aisb with args through the Podman
// service at host (CONTAINER_HOST; "" for aisb to find or start one, as
// for a user without a running service), for UserCommand.
func (a Aisb) Argv(host string, args ...string) []string {
	env := append([]string{"XDG_CONFIG_HOME=" + a.Config, "XDG_STATE_HOME=" + a.State}, a.Helpers...)
	if a.Base != "" {
		env = append(env, "AISB_BASE_IMAGE="+a.Base)
	}
	if host != "" {
		env = append(env, "CONTAINER_HOST="+host)
	}
	return append(append(append([]string{"env"}, env...), a.Bin), args...)
}

// Command runs aisb with args as the test user in the project directory,
// through host as for Argv, with the variables env added to aisb's own
// environment. They go through a file the shell sources, never through
// any command line: some of them are secrets a test looks for.
func (a Aisb) Command(t testing.TB, ctx context.Context, host string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	argv := a.Argv(host, args...)
	if len(env) > 0 {
		file := filepath.Join(UserDir(t), "env")
		var b strings.Builder
		for _, e := range env {
			k, v, _ := strings.Cut(e, "=")
			fmt.Fprintf(&b, "export %s='%s'\n", k, v)
		}
		WriteUserFile(t, file, b.String())
		argv = append([]string{"sh", "-c", ". " + file + " && exec \"$@\"", "sh"}, argv...)
	}
	cmd := UserCommand(ctx, argv...)
	cmd.Dir = a.Project
	// Killing cmd kills runuser, not aisb under it, and a child that
	// outlives aisb may hold its output pipes: Wait gives up on them then,
	// rather than hanging the test until aisb's own end (or go test's
	// timeout).
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// WriteUserFile writes a file (and its directory) owned by the test user.
func WriteUserFile(t testing.TB, path, content string) {
	t.Helper()
	u, err := user.Lookup(User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Dir(path), uid, gid)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(path, uid, gid)
}
