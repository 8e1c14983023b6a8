package tests

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestTerminal: an interactive shell gets a real TTY whose size follows the
// window, Ctrl-P reaches the agent instead of detaching, and the exit status
// comes back.
func TestTerminal(t *testing.T) {
	a := newAisb(t, testBaseImage(t), "")
	env := []string{"TERM=xterm", "XDG_CONFIG_HOME=" + a.config, "XDG_STATE_HOME=" + a.state, "AISB_BASE_IMAGE=" + a.base, "CONTAINER_HOST=" + testhost.Service(t)}
	tm := testhost.NewTerminal(t, a.project, env, a.bin+" run --harness shell")
	tm.WaitFor("/project$", 2*time.Minute)
	tm.Keys("stty size", "Enter")
	tm.WaitFor("30 120", 10*time.Second)
	tm.Resize(100, 30)
	time.Sleep(500 * time.Millisecond)
	tm.Keys("clear; stty size", "Enter")
	tm.WaitFor("30 100", 10*time.Second)
	// Ctrl-P is bash's "previous command": if it reached bash, Enter runs
	// the echo a second time; had it been taken as a detach key, nothing would.
	tm.Keys("clear", "Enter")
	tm.Keys("echo ctrl-p-reached-bash", "Enter")
	tm.WaitFor("\nctrl-p-reached-bash", 10*time.Second)
	tm.Keys("C-p")
	tm.Keys("Enter")
	for end := time.Now().Add(10 * time.Second); countLines(tm.Screen(), "ctrl-p-reached-bash") < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("Ctrl-P did not reach the shell:\n%s", tm.Screen())
		}
	}
	tm.Keys("exit 5", "Enter")
	tm.WaitFor("EXIT=5", 30*time.Second)
}

// TestReadmeMainJob runs the README's main-job command for a machine without
// a registry exactly as written, in a real terminal, with aisb on PATH and no
// CONTAINER_HOST (aisb starts its own Podman service): pi starts, takes
// Ctrl-P, and exits with Ctrl-D.
func TestReadmeMainJob(t *testing.T) {
	a := newAisb(t, "", "")
	cmd := readmeLine(t, "AISB_BASE_IMAGE=localhost/aisb-base:trixie aisb run")
	env := []string{"TERM=xterm-256color", "XDG_CONFIG_HOME=" + a.config, "XDG_STATE_HOME=" + a.state, "ANTHROPIC_API_KEY=not-a-real-key",
		"PATH=" + filepath.Dir(a.bin) + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
	tm := testhost.NewTerminal(t, a.project, env, cmd)
	tm.WaitFor("pi v", 5*time.Minute)
	if strings.Contains(tm.Screen(), "Failed to download") {
		t.Errorf("pi tried to download a tool the image should have:\n%s", tm.Screen())
	}
	tm.Keys("C-p")
	tm.WaitFor("Switched to", 10*time.Second)
	tm.Keys("C-d")
	time.Sleep(300 * time.Millisecond)
	tm.Keys("C-d")
	tm.WaitFor("EXIT=0", 30*time.Second)
}

// readmeLine returns the README line that starts with prefix.
func readmeLine(t *testing.T, prefix string) string {
	t.Helper()
	f, err := os.Open(testhost.RepoPath("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("README.md has no line starting with %q", prefix)
	return ""
}

func countLines(screen, line string) int {
	n := 0
	for _, l := range strings.Split(screen, "\n") {
		if strings.TrimSpace(l) == line {
			n++
		}
	}
	return n
}
