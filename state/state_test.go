package state

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
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
