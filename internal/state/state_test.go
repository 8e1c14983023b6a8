package state

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

func TestOwner(t *testing.T) {
	if !OwnerAlive(Owner()) {
		t.Fatalf("this process (%s) is not alive", Owner())
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(cmd.Process.Pid) + ":1"
	for _, o := range []string{dead, "", "x", "1:x", "-1:5", Owner() + "1"} {
		if OwnerAlive(o) {
			t.Errorf("OwnerAlive(%q) = true", o)
		}
	}
}

// TestOwnerExited: a process that has exited counts as exited while it is a
// zombie not yet reaped (its files are closed), and once it is gone.
func TestOwnerExited(t *testing.T) {
	if OwnerExited(Owner()) {
		t.Fatal("this process counts as exited")
	}
	cmd := exec.Command("sleep", "0.1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := OwnerOf(cmd.Process.Pid)
	if OwnerExited(o) {
		t.Error("a running child counts as exited")
	}
	time.Sleep(500 * time.Millisecond) // exited, not yet reaped
	if !OwnerAlive(o) || !OwnerExited(o) {
		t.Errorf("a zombie: alive %v, exited %v", OwnerAlive(o), OwnerExited(o))
	}
	cmd.Wait()
	if !OwnerExited(o) {
		t.Error("a reaped child does not count as exited")
	}
	for _, bad := range []string{"", "x", "1:0"} {
		if !OwnerExited(bad) {
			t.Errorf("OwnerExited(%q) = false", bad)
		}
	}
}

func TestSessionID(t *testing.T) {
	a, b := NewSessionID(), NewSessionID()
	if a == b || !regexp.MustCompile(`^\d{8}-\d{6}-[0-9a-f]{6}$`).MatchString(a) {
		t.Errorf("ids %q %q", a, b)
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{"HOME": "/home/u", "XDG_STATE_HOME": "/s", "XDG_RUNTIME_DIR": "/run/user/7"}
	p, err := FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if p.Config != "/home/u/.config/aisb" || p.State != "/s/aisb" || p.Runtime != "/run/user/7" || p.LockDir() != "/run/user/7/aisb" {
		t.Errorf("%+v", p)
	}
	if _, err := FromEnv(func(string) string { return "" }); err == nil {
		t.Error("no HOME and no XDG directories: accepted")
	}
}
