package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/aisb-dev/aisb/contract"
)

// upperWith makes an upper directory whose status file is made by mk.
func upperWith(t *testing.T, mk func(path string) error) string {
	t.Helper()
	upper := t.TempDir()
	p := filepath.Join(upper, contract.StatusPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mk(p); err != nil {
		t.Fatal(err)
	}
	return upper
}

func writeStatus(body string) func(string) error {
	return func(p string) error { return os.WriteFile(p, []byte(body), 0o644) }
}

// statusFromUpper is what a session gets from the reader.
func statusFromUpper(upper string, rootUID int) (contract.Status, error) {
	b, err := ReadUpperStatus(upper, rootUID)
	if err != nil {
		return contract.Status{}, err
	}
	return contract.ParseStatus(b)
}

// TestStatusFromUpper: the shortcut reads only a regular file of the
// container's root, beneath the upper directory, never through a link; the
// control is the same file as the entrypoint leaves it.
func TestStatusFromUpper(t *testing.T) {
	me := os.Getuid()
	good := `{"outcome":"enforced"}` + "\n"

	// Control: the entrypoint's file, owned by the container's root.
	s, err := statusFromUpper(upperWith(t, writeStatus(good)), me)
	if err != nil || s.Outcome != contract.OutcomeEnforced {
		t.Fatalf("the entrypoint's own file: %+v, %v", s, err)
	}

	elsewhere := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(elsewhere, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		upper   string
		rootUID int
	}{
		"owned by another uid (the agent's)": {upperWith(t, writeStatus(good)), me + 1},
		"a link to a file outside":           {upperWith(t, func(p string) error { return os.Symlink(elsewhere, p) }), me},
		"a link to a file inside": {upperWith(t, func(p string) error {
			if err := os.WriteFile(p+".real", []byte(good), 0o644); err != nil {
				return err
			}
			return os.Symlink(filepath.Base(p)+".real", p)
		}), me},
		"a directory on the path is a link": {func() string {
			upper := t.TempDir()
			real := filepath.Join(t.TempDir(), "aisb")
			if err := os.MkdirAll(real, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(real, filepath.Base(contract.StatusPath)), []byte(good), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(upper, "run"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, filepath.Join(upper, filepath.Dir(contract.StatusPath))); err != nil {
				t.Fatal(err)
			}
			return upper
		}(), me},
		"a FIFO (must not hang)": {upperWith(t, func(p string) error { return syscall.Mkfifo(p, 0o644) }), me},
		"a directory":            {upperWith(t, func(p string) error { return os.Mkdir(p, 0o755) }), me},
		"missing":                {upperWith(t, func(string) error { return nil }), me},
		"not a status":           {upperWith(t, writeStatus(`{"outcome":"fine"}`)), me},
		"too long":               {upperWith(t, writeStatus(`{"outcome":"enforced","step":"`+strings.Repeat("x", 5000)+`"}`)), me},
		"a relative upper":       {"relative/upper", me},
		"no upper":               {"", me},
		"no root mapping":        {upperWith(t, writeStatus(good)), -1},
	}
	for name, c := range cases {
		if s, err := statusFromUpper(c.upper, c.rootUID); err == nil {
			t.Errorf("%s: read as %+v", name, s)
		}
	}
}

// TestMapUID: a uid of Podman's namespace maps through the right line of a
// uid_map; one outside every line maps to nothing.
func TestMapUID(t *testing.T) {
	m := "         0       1001          1\n         1     100000      65536\n"
	for in, want := range map[int]int{0: 1001, 1: 100000, 1000: 100999, 65536: 165535, 65537: -1, -1: -1} {
		if got := mapUID(m, in); got != want {
			t.Errorf("uid %d: got %d, want %d", in, got, want)
		}
	}
	if got := mapUID("garbage", 0); got != -1 {
		t.Errorf("a map that does not parse gave %d", got)
	}
}

// TestPausePIDNeedsOurNamespace: the pause process named must hold a
// namespace whose root is this user and which maps more than the identity;
// anything else is no shortcut.
func TestPausePIDNeedsOurNamespace(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "libpod", "tmp", "pause.pid")
	if err := os.MkdirAll(filepath.Dir(pidFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := pausePID(dir); err == nil {
		t.Errorf("no pause.pid: accepted")
	}
	// This test's own process is in the initial namespace, whose map is the
	// identity: not a rootless namespace, whoever runs the test.
	for _, pid := range []string{"garbage", "1", "0", "-5", strconv.Itoa(os.Getpid())} {
		if err := os.WriteFile(pidFile, []byte(pid), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := pausePID(dir); err == nil {
			t.Errorf("pause.pid %q: accepted as %d", pid, got)
		}
	}
}
