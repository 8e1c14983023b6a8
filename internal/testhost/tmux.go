package testhost

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Terminal is a tmux session running a command as the test user: a real
// terminal for tests of interactive use.
type Terminal struct {
	t    testing.TB
	name string
}

// NewTerminal starts shellCmd (run by sh as the test user, in dir, with
// UserEnv plus env) in a 120x30 tmux window; the window stays open 60 s
// after the command ends and prints EXIT=<status>.
func NewTerminal(t testing.TB, dir string, env []string, shellCmd string) *Terminal {
	t.Helper()
	name := fmt.Sprintf("aisb-tty-%d", rand.IntN(1e6))
	argv := append([]string{"runuser", "-u", User, "--", "env", "-i"}, UserEnv()...)
	argv = append(argv, env...)
	argv = append(argv, "sh", "-c", "cd '"+dir+"' && "+shellCmd+"; echo EXIT=$?; sleep 60")
	var quoted []string
	for _, a := range argv {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	if out, err := exec.Command("tmux", "new-session", "-d", "-s", name, "-x", "120", "-y", "30", strings.Join(quoted, " ")).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("tmux", "kill-session", "-t", name).Run() })
	return &Terminal{t: t, name: name}
}

// Screen is what the terminal shows now.
func (tm *Terminal) Screen() string {
	out, _ := exec.Command("tmux", "capture-pane", "-p", "-t", tm.name).Output()
	return string(out)
}

// WaitFor waits until the screen shows s, failing the test after timeout.
func (tm *Terminal) WaitFor(s string, timeout time.Duration) {
	tm.t.Helper()
	err := WaitFor(timeout, func() error {
		if !strings.Contains(tm.Screen(), s) {
			return fmt.Errorf("terminal never showed %q", s)
		}
		return nil
	})
	if err != nil {
		tm.t.Fatalf("%v; it shows:\n%s", err, tm.Screen())
	}
}

// Keys sends tmux key names (e.g. "C-p", "Enter") or literal text.
func (tm *Terminal) Keys(keys ...string) {
	exec.Command("tmux", append([]string{"send-keys", "-t", tm.name}, keys...)...).Run()
}

// Resize changes the window's size.
func (tm *Terminal) Resize(cols, rows int) {
	exec.Command("tmux", "resize-window", "-t", tm.name, "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows)).Run()
}
