package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets a test run aisb in a child process of its own (the test
// binary again), so a command that hangs or eats memory is killed by the
// test's own timeout instead of taking the test binary with it.
func TestMain(m *testing.M) {
	if args := os.Getenv("AISB_TEST_CHILD_ARGS"); args != "" {
		os.Exit(run(append([]string{"aisb"}, strings.Split(args, "\x1f")...), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runChild runs aisb with args in dir in a child process, killed after
// timeout; hung reports that it had to be killed.
func runChild(t *testing.T, dir string, timeout time.Duration, env []string, args ...string) (code int, stdout, stderr string, hung bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), "AISB_TEST_CHILD_ARGS="+strings.Join(args, "\x1f"))
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		return -1, out.String(), errb.String(), true
	}
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String(), false
}

// TestHostileProjectFile: a .aisb.toml the agent turned into a symlink to
// /dev/zero, a FIFO, a directory or a symlink to another file is an error
// naming it, from every command that reads it, and never a hang.
func TestHostileProjectFile(t *testing.T) {
	cfg := t.TempDir()
	elsewhere := filepath.Join(t.TempDir(), "other.toml")
	os.WriteFile(elsewhere, []byte("version = 1\n"), 0o644)
	kinds := map[string]func(path string) error{
		"symlink to /dev/zero": func(p string) error { return os.Symlink("/dev/zero", p) },
		"fifo":                 func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"directory":            func(p string) error { return os.Mkdir(p, 0o755) },
		"symlink to a file":    func(p string) error { return os.Symlink(elsewhere, p) },
	}
	for kind, make := range kinds {
		proj := t.TempDir()
		path := filepath.Join(proj, ".aisb.toml")
		if err := make(path); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"config", "check"}, {"trust", "--sha256", strings.Repeat("0", 64)}, {"run", "--harness", "shell", "--", "true"}} {
			code, _, stderr, hung := runChild(t, proj, 10*time.Second, []string{"XDG_CONFIG_HOME=" + cfg, "XDG_STATE_HOME=" + cfg, "CONTAINER_HOST=unix:///nonexistent"}, args...)
			switch {
			case hung:
				t.Errorf("%s: aisb %s hung (killed after 10 s)", kind, strings.Join(args, " "))
			case code == 0 || !strings.Contains(stderr, path):
				t.Errorf("%s: aisb %s: exit %d, want an error naming %s; stderr %q", kind, strings.Join(args, " "), code, path, stderr)
			case !strings.Contains(stderr, "not a regular file") && !strings.Contains(stderr, "symbolic link"):
				t.Errorf("%s: aisb %s: the error does not say what is wrong with the file: %q", kind, strings.Join(args, " "), stderr)
			}
		}
	}
}

// TestConfigTextIsPrintable: escape sequences in a quoted key or a value of
// an untrusted .aisb.toml never reach the terminal raw.
func TestConfigTextIsPrintable(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	proj := t.TempDir()
	os.WriteFile(filepath.Join(proj, ".aisb.toml"), []byte("version = 1\n[env.set]\n\"\\u001b]0;owned\\u0007\\u001b[2J\" = \"x\"\n"+
		"[env]\npass = [\"\\u001b[31mRED\"]\n[network]\nallowed_hosts = [\"\\u001b[1mx.example\"]\n"), 0o644)
	for _, args := range [][]string{{"config", "check"}, {"config", "check", filepath.Join(proj, ".aisb.toml")}} {
		code, _, stderr := runAisb(t, proj, args...)
		if code == 0 {
			t.Errorf("aisb %v accepted invalid names", args)
		}
		if i := strings.IndexFunc(stderr, func(r rune) bool { return (r < 0x20 && r != '\n') || r == 0x7f }); i >= 0 {
			t.Errorf("aisb %v put a control character on stderr at %d: %q", args, i, stderr)
		}
	}
	// A harmless key of a trusted-looking file narrowed by the user's
	// configuration: the notices are printable too.
	os.WriteFile(filepath.Join(proj, ".aisb.toml"), []byte("version = 1\n[network]\nallowed_hosts = [\"x.example\"]\n[env.set]\nOK = \"\\u001b[2J\"\n"), 0o644)
	_, _, stderr := runAisb(t, proj, "config", "check")
	if strings.ContainsRune(stderr, 0x1b) {
		t.Errorf("notices put ESC on stderr: %q", stderr)
	}
}

// TestProjectModeNarrowingReported: a project file that lowers the mode is
// said, like every other change it makes.
func TestProjectModeNarrowingReported(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	proj := t.TempDir()
	os.WriteFile(filepath.Join(proj, ".aisb.toml"), []byte("version = 1\n[network]\nmode = \"none\"\n"), 0o644)
	code, _, stderr := runAisb(t, proj, "config", "check")
	if code != 0 || !strings.Contains(stderr, "network.mode") || !strings.Contains(stderr, `"none"`) {
		t.Errorf("mode narrowed silently: exit %d, stderr %q", code, stderr)
	}
}

// trustOnTerminal runs `aisb trust` with a terminal as stdin on which the
// user has typed "y": what a user who read the file and agreed does.
func trustOnTerminal(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ptm, pts := openPTY(t)
	ptm.Write([]byte("y\n"))
	go func() { // drain the echo
		b := make([]byte, 4096)
		for {
			if _, err := ptm.Read(b); err != nil {
				return
			}
		}
	}()
	var out, errb strings.Builder
	code = run(append([]string{"aisb", "trust"}, args...), pts, &out, &errb)
	return code, out.String(), errb.String()
}

// TestTrustStoreForgery: a project directory whose path holds a newline
// cannot make the trust store say another project's file is trusted.
func TestTrustStoreForgery(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	os.MkdirAll(filepath.Join(cfg, "aisb"), 0o755)
	os.WriteFile(filepath.Join(cfg, "aisb", "config.toml"), []byte("version = 1\n"), 0o644)

	victim := t.TempDir()
	evil := []byte("version = 1\n[network]\nmode = \"open\"\n")
	os.WriteFile(filepath.Join(victim, ".aisb.toml"), evil, 0o644)
	sum := sha256.Sum256(evil)
	// The repository's nested directories spell a second store line.
	forged := filepath.Join(t.TempDir(), "a\nsha256:"+hex.EncodeToString(sum[:])+" ") + victim
	if err := os.MkdirAll(forged, 0o755); err != nil {
		t.Fatal(err)
	}
	own := []byte("version = 1\n")
	os.WriteFile(filepath.Join(forged, ".aisb.toml"), own, 0o644)

	code, _, stderr := trustOnTerminal(t, forged)
	if code != 0 {
		t.Logf("trust of the forging directory refused (acceptable): exit %d %q", code, stderr)
	} else if strings.ContainsAny(stderr, "\n") && strings.Contains(stderr, "a\nsha256") {
		t.Errorf("the path was printed raw: %q", stderr)
	}
	code, _, stderr = runAisb(t, victim, "config", "check")
	if code != 0 || !strings.Contains(stderr, "network.mode ignored") {
		t.Errorf("the victim's file is trusted through a forged store line: exit %d, stderr %q", code, stderr)
	}
}

// TestTrustShowsWhatItHashes: aisb trust prints the exact content it
// records, its sha256 and what it widens, and asks on a terminal.
func TestTrustShowsWhatItHashes(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	proj := t.TempDir()
	content := []byte("version = 1\n[network]\nallowed_hosts = [\"wide.example\"]\n# \u202ehidden\n")
	os.WriteFile(filepath.Join(proj, ".aisb.toml"), content, 0o644)
	sum := sha256.Sum256(content)
	hexsum := hex.EncodeToString(sum[:])

	code, _, stderr := trustOnTerminal(t, proj)
	if code != 0 {
		t.Fatalf("trust on a terminal: exit %d %q", code, stderr)
	}
	for _, want := range []string{"allowed_hosts = [\"wide.example\"]", hexsum, "wide.example", `\xe2\x80\xaehidden`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("trust did not show %q: %q", want, stderr)
		}
	}
	if strings.ContainsRune(stderr, 0x202e) {
		t.Errorf("trust showed the content raw: %q", stderr)
	}
	// Without a terminal, only the hash the user reviewed is trusted.
	os.WriteFile(filepath.Join(proj, ".aisb.toml"), append(content, '\n'), 0o644)
	if code, _, stderr := runAisb(t, proj, "trust"); code == 0 {
		t.Errorf("trust without a terminal and without --sha256 succeeded: %q", stderr)
	}
	if code, _, stderr := runAisb(t, proj, "trust", "--sha256", hexsum); code == 0 || !strings.Contains(stderr, hexsum) {
		t.Errorf("trust with the hash of other content: exit %d %q", code, stderr)
	}
	sum = sha256.Sum256(append(content, '\n'))
	if code, _, stderr := runAisb(t, proj, "trust", "--sha256", hex.EncodeToString(sum[:])); code != 0 {
		t.Errorf("trust with the right hash: exit %d %q", code, stderr)
	}
	// --list shows it; --revoke takes it back.
	if code, out, stderr := runAisb(t, proj, "trust", "--list"); code != 0 || !strings.Contains(out, filepath.Join(proj, ".aisb.toml")) || !strings.Contains(out, hex.EncodeToString(sum[:])) {
		t.Errorf("trust --list: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if code, _, stderr := runAisb(t, proj, "trust", "--revoke"); code != 0 {
		t.Errorf("trust --revoke: exit %d %q", code, stderr)
	}
	if code, _, stderr := runAisb(t, proj, "config", "check"); code != 0 || !strings.Contains(stderr, "wide.example\" ignored") {
		t.Errorf("after --revoke the file is still trusted: exit %d %q", code, stderr)
	}
}

// TestTrustOldStore: a store written by an earlier aisb ("sha256:HEX PATH"
// lines) is still honoured.
func TestTrustOldStore(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	proj := t.TempDir()
	content := []byte("version = 1\n[network]\nallowed_hosts = [\"wide.example\"]\n")
	os.WriteFile(filepath.Join(proj, ".aisb.toml"), content, 0o644)
	sum := sha256.Sum256(content)
	os.MkdirAll(filepath.Join(cfg, "aisb"), 0o700)
	os.WriteFile(filepath.Join(cfg, "aisb", "trusted"), []byte("sha256:"+hex.EncodeToString(sum[:])+" "+filepath.Join(proj, ".aisb.toml")+"\n"), 0o600)
	if code, out, stderr := runAisb(t, proj, "config", "check"); code != 0 || strings.Contains(stderr, "ignored") || !strings.Contains(out, "allow wide.example") {
		t.Errorf("old store not honoured: exit %d %q %q", code, out, stderr)
	}
}
