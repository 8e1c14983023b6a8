package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containers/podman/v5/libpod/define"

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

// TestPausePIDNeedsOurNamespace: a pause.pid that is missing, garbage or
// names a process of the initial namespace gives no shortcut.
func TestPausePIDNeedsOurNamespace(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "libpod", "tmp", "pause.pid")
	if err := os.MkdirAll(filepath.Dir(pidFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := pausePID(dir, 1); err == nil {
		t.Errorf("no pause.pid: accepted")
	}
	// This test's own process is in the initial namespace, whose map is the
	// identity: not a rootless namespace, whoever runs the test.
	for _, pid := range []string{"garbage", "1", "0", "-5", strconv.Itoa(os.Getpid())} {
		if err := os.WriteFile(pidFile, []byte(pid), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := pausePID(dir, 1); err == nil {
			t.Errorf("pause.pid %q: accepted as %d", pid, got)
		}
	}
}

// TestCheckRootlessMap: Podman's namespace of this user, mapping the
// container's root to a subordinate uid, passes (the control); the
// identity, another user's, plain "unshare -r" and a root that is the
// user do not.
func TestCheckRootlessMap(t *testing.T) {
	podman := "         0       1001          1\n         1     100000      65536\n"
	if err := checkRootlessMap(podman, 1001, 1); err != nil {
		t.Errorf("rootless Podman's map: %v", err)
	}
	for name, c := range map[string]struct {
		m         string
		uid, root int
	}{
		"the initial namespace":         {"         0          0 4294967295\n", 0, 1},
		"another user's namespace":      {podman, 1002, 1},
		"unshare -r":                    {"         0       1001          1\n", 1001, 1},
		"the container's root is us":    {podman, 1001, 0},
		"the container's root unmapped": {podman, 1001, 70000},
		"no container root":             {podman, 1001, -1},
	} {
		if err := checkRootlessMap(c.m, c.uid, c.root); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSystemProgram: nsenter comes from the system's directories only,
// whatever PATH says.
func TestSystemProgram(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "nsenter")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho '{\"outcome\":\"enforced\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	p, err := systemProgram("nsenter")
	if err != nil {
		t.Fatalf("this host has no nsenter of root's (util-linux): %v", err)
	}
	if p == fake || !filepath.IsAbs(p) {
		t.Errorf("nsenter from %s", p)
	}
	if _, err := systemProgram("aisb-no-such-program"); err == nil {
		t.Errorf("a missing program was found")
	}
}

// TestRootOwner: the archive's owner of the container's root under
// keep-id; none when the map sends the root and the agent to one id.
func TestRootOwner(t *testing.T) {
	keepID := &define.InspectContainerData{HostConfig: &define.InspectContainerHostConfig{IDMappings: &define.InspectIDMappings{
		UIDMap: []string{"0:1:1000", "1000:0:1", "1001:1001:64535"},
	}}}
	if got := rootOwner(keepID); got != 1 {
		t.Errorf("keep-id: %d, want 1", got)
	}
	same := &define.InspectContainerData{HostConfig: &define.InspectContainerHostConfig{IDMappings: &define.InspectIDMappings{
		UIDMap: []string{"0:0:1", "1000:0:1"},
	}}}
	if got := rootOwner(same); got != -1 {
		t.Errorf("root and agent on one id: %d, want -1", got)
	}
	for _, none := range []*define.InspectContainerData{{}, {HostConfig: &define.InspectContainerHostConfig{}}} {
		if got := rootOwner(none); got != 0 {
			t.Errorf("no map: %d, want 0", got)
		}
	}
}

// TestPendingReaderReadsOnlyWhenTold: the reader started while the sandbox
// runs does nothing until told; a reader never told (the session ended
// another way) ends without reading, and one that does not answer in time
// is killed rather than waited for.
func TestPendingReaderReadsOnlyWhenTold(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "read")
	// Stands in for the reader: like internal-read-status --when-told, it
	// reads (here: records that it read) only after a line on stdin.
	told := `IFS= read -r x || exit 3; touch ` + marker + `; printf '{"outcome":"enforced"}\n'`

	// Control: told, it reads and its answer is parsed.
	p, err := startPending(exec.Command("/bin/sh", "-c", told))
	if err != nil {
		t.Fatal(err)
	}
	// Out of aisb's process group: a terminal's Ctrl-C, meant for the
	// agent, does not reach it.
	if pg, err := syscall.Getpgid(p.cmd.Process.Pid); err != nil || pg == syscall.Getpgrp() {
		t.Fatalf("the reader's process group is %d (%v), aisb's is %d: want its own", pg, err, syscall.Getpgrp())
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the reader read before it was told")
	}
	s, err := p.read()
	if err != nil || s.Outcome != contract.OutcomeEnforced {
		t.Fatalf("told reader: %+v, %v", s, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the told reader did not read: %v", err)
	}

	// Never told: it ends on its own, having read nothing.
	os.Remove(marker)
	p, err = startPending(exec.Command("/bin/sh", "-c", told))
	if err != nil {
		t.Fatal(err)
	}
	p.cancel()
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a reader that was never told read")
	}
	if p.cmd.ProcessState == nil || p.cmd.ProcessState.ExitCode() != 3 {
		t.Fatalf("a reader never told: %v, want it ended (exit 3) by its closed pipe", p.cmd.ProcessState)
	}

	// A reader that fails says so, with what it printed on stderr.
	p, err = startPending(exec.Command("/bin/sh", "-c", `read -r x; echo refused >&2; exit 1`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.read(); !errors.Is(err, errNoUpper) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("failing reader: %v", err)
	}
}

// TestWaitToBeTold: one byte is the word; a closed pipe is not.
func TestWaitToBeTold(t *testing.T) {
	if err := WaitToBeTold(strings.NewReader("\n")); err != nil {
		t.Fatalf("told: %v", err)
	}
	if err := WaitToBeTold(strings.NewReader("")); !errors.Is(err, errNotTold) {
		t.Fatalf("pipe closed: %v, want errNotTold", err)
	}
}

// TestReaderCommand: the reader is nsenter as found in the system's
// directories (never PATH) running aisb's binary by the descriptor opened
// before the sandbox started.
func TestReaderCommand(t *testing.T) {
	self, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	r := &statusReader{nsenter: "/usr/bin/nsenter", self: self, args: []string{"internal-read-status"}}
	cmd := r.command(4242, "/upper", 1)
	if cmd.Path != "/usr/bin/nsenter" {
		t.Errorf("runs %q, want the nsenter found in the system's directories", cmd.Path)
	}
	want := []string{"/usr/bin/nsenter", "--user", "--target", "4242", "--preserve-credentials", "--", "/proc/self/fd/3", "internal-read-status", "--upper", "/upper", "--root-uid", "1", "--when-told"}
	if strings.Join(cmd.Args, " ") != strings.Join(want, " ") {
		t.Errorf("argv %q, want %q", cmd.Args, want)
	}
	if len(cmd.ExtraFiles) != 1 || cmd.ExtraFiles[0] != self {
		t.Errorf("descriptor 3 is not aisb's binary as opened before the start: %v", cmd.ExtraFiles)
	}
}
