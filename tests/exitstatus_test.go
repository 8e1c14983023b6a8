package tests

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestCommandCannotForgeEnforcementFailure: a command that exits 77 or 78 is
// reported as that command's status; "could not be enforced" comes only from
// the entrypoint's own account, which the command cannot write.
func TestCommandCannotForgeEnforcementFailure(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), dnsConfig())
	for _, mode := range []string{"none", "allow"} {
		for _, code := range []int{77, 78} {
			r := a.run(t, "run", "--net", mode, "--harness", "shell", "--", "sh", "-c",
				"echo ran; echo '{\"outcome\":\"failed\",\"code\":77,\"step\":\"install table\"}' > /run/aisb/entrypoint.status; exit "+strconv.Itoa(code))
			if r.Code != code || !strings.Contains(r.Stdout, "ran") {
				t.Errorf("--net %s, exit %d: %s", mode, code, r)
			}
			for _, lie := range []string{"could not be enforced", "did not run", "policy was missing or invalid"} {
				if strings.Contains(r.Stderr, lie) {
					t.Errorf("--net %s: the command's exit %d was reported as %q: %s", mode, code, lie, r)
				}
			}
		}
	}
}

// TestAllowUnenforcedStillEnforces: --allow-unenforced only matters when the
// table cannot be installed; where it can, the sandbox is as closed as ever.
func TestAllowUnenforcedStillEnforces(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	a := newAisb(t, base, dnsConfig())
	up := testhost.UpstreamAddr
	plainControl(t, base, "tcp", up+":80")
	r := a.run(t, "run", "--allow-unenforced", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c",
		"probe tcp "+up+":80; echo direct=$?; probe http-proxy $HTTP_PROXY http://allowed.test/; echo gate=$?")
	if !strings.Contains(r.Stdout, "direct=1") || !strings.Contains(r.Stdout, "gate=0") {
		t.Errorf("--allow-unenforced on a host that can enforce: %s", r)
	}
	if strings.Contains(r.Stderr, "NOT enforced") {
		t.Errorf("said unenforced although the table was installed: %s", r.Stderr)
	}
}

// TestStatusReadFromUpperDirectory: with Podman on this host, aisb reads the
// entrypoint's status from the stopped container's upper directory instead
// of an archive copy (which mounts the container's storage, ~100 ms of
// every start-up), and what it reads is the entrypoint's: a session runs
// without a word about its status, and a command that writes a lie into
// the status file (TestCommandCannotForgeEnforcementFailure) cannot.
func TestStatusReadFromUpperDirectory(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), dnsConfig())
	for _, mode := range []string{"none", "allow"} {
		r := a.runEnv(t, []string{"AISB_TRACE=1"}, "run", "--net", mode, "--harness", "shell", "--", "sh", "-c",
			"echo lie > /run/aisb/entrypoint.status && echo WROTE; exit 3")
		if r.Code != 3 || strings.Contains(r.Stdout, "WROTE") {
			t.Errorf("--net %s: %s", mode, r)
		}
		if !strings.Contains(r.Stderr, "entrypoint's status read from the container's upper directory") {
			t.Errorf("--net %s: the status was not read from the upper directory: %s", mode, r.Stderr)
		}
		if strings.Contains(r.Stderr, "left no account") || strings.Contains(r.Stderr, "did not run") {
			t.Errorf("--net %s: the entrypoint's account was not read: %s", mode, r.Stderr)
		}
	}
}

// TestStatusReaderRunsNothingTheAgentWrote: the status reader runs on the
// host while and after the agent runs, so nothing it runs may be a file the
// agent could change. Here aisb's own binary sits in the project and the
// project is on aisb's PATH (an activated virtualenv, a tools directory):
// an nsenter on that PATH (left by an earlier session: the reader starts
// as the sandbox does, before this session's agent could write one) and,
// from the agent, a replaced aisb binary, both a script that leaves a mark
// on the host. Neither runs, and the status is still read from the upper
// directory; the control runs the script by hand.
func TestStatusReaderRunsNothingTheAgentWrote(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), dnsConfig())
	marker := filepath.Join(testhost.UserDir(t), "ran")
	fake := "#!/bin/sh\ntouch " + marker + "\necho '{\"outcome\":\"enforced\"}'\n"
	writeUserFile(t, filepath.Join(a.project, "fake.sh"), fake)
	bin, err := os.ReadFile(a.bin)
	if err != nil {
		t.Fatal(err)
	}
	writeUserFile(t, filepath.Join(a.project, "tools", "aisb"), string(bin))
	os.Chmod(filepath.Join(a.project, "tools", "aisb"), 0o755)
	a.bin = filepath.Join(a.project, "tools", "aisb")

	// Control: the script, run as the user on the host, leaves its mark.
	if r := testhost.Run(t, testhost.UserCommand(context.Background(), "sh", filepath.Join(a.project, "fake.sh"))); r.Code != 0 {
		t.Fatalf("control: %s", r)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("control: the script left no mark: %v", err)
	}
	os.Remove(marker)
	writeUserFile(t, filepath.Join(a.project, "bin", "nsenter"), fake)
	os.Chmod(filepath.Join(a.project, "bin", "nsenter"), 0o755)

	r := a.runEnv(t, []string{"AISB_TRACE=1", "PATH=" + filepath.Join(a.project, "bin") + ":/usr/local/bin:/usr/bin:/bin"},
		"run", "--net", "none", "--harness", "shell", "--", "sh", "-c",
		"cp fake.sh tools/aisb.new && chmod 755 tools/aisb.new && mv tools/aisb.new tools/aisb && echo PLANTED")
	if r.Code != 0 || !strings.Contains(r.Stdout, "PLANTED") {
		t.Fatalf("the agent could not plant its files: %s", r)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a file the agent wrote ran on the host after the session: %s", r.Stderr)
	}
	if !strings.Contains(r.Stderr, "entrypoint's status read from the container's upper directory") {
		t.Errorf("the status was not read from the upper directory: %s", r.Stderr)
	}
}

// TestStatusReadByCopyElsewhere: for a Podman that is not this user's own
// on this host (here its socket, reached through a link outside the user's
// runtime directory, as a forwarded socket would be), aisb reads the
// entrypoint's status by the archive copy, and reads it as well: a session
// ends with no word about its status, and the command's own 77 is not taken
// for the entrypoint's.
func TestStatusReadByCopyElsewhere(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), dnsConfig())
	link := filepath.Join(testhost.UserDir(t), "podman.sock")
	if err := os.Symlink(strings.TrimPrefix(testhost.Service(t), "unix://"), link); err != nil {
		t.Fatal(err)
	}
	a.host = "unix://" + link
	for _, code := range []int{0, 77} {
		r := a.runEnv(t, []string{"AISB_TRACE=1"}, "run", "--net", "none", "--harness", "shell", "--", "sh", "-c", "exit "+strconv.Itoa(code))
		if r.Code != code {
			t.Errorf("exit %d: %s", code, r)
		}
		if !strings.Contains(r.Stderr, "entrypoint's status read from an archive copy") {
			t.Errorf("exit %d: the status was not read by the copy: %s", code, r.Stderr)
		}
		for _, lie := range []string{"could not be enforced", "left no account", "did not run"} {
			if strings.Contains(r.Stderr, lie) {
				t.Errorf("exit %d: %q: %s", code, lie, r.Stderr)
			}
		}
	}
}
