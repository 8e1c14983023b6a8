package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestSessionsAtOnce: six sessions of one user started at the same instant
// (five projects, two sessions in one of them) against one Podman service
// all start, each enforced with a gate of its own: each reaches the
// upstream through its own gate, not directly, and not through any other
// session's gate port. Afterwards nothing is left. The burst is repeated to
// catch a race (Podman's keep-id mapping is not safe for concurrent
// creates in one service; engine.Create serialises them).
func TestSessionsAtOnce(t *testing.T) {
	base := testBaseImage(t)
	const sessions, bursts = 6, 3
	users := make([]*aisbUser, sessions)
	for i := range users {
		if i == sessions-1 {
			u := *users[0] // the last shares the first one's project
			users[i] = &u
			continue
		}
		users[i] = newAisb(t, base, dnsConfig())
	}
	up := testhost.UpstreamAddr
	// Each session writes its gate port into its project, waits for the
	// test to list every session's port, then tries them all.
	script := `id=$(head -c8 /proc/sys/kernel/random/uuid); port=${HTTP_PROXY##*:}; echo $port > /project/port-$id
probe http-proxy $HTTP_PROXY http://allowed.test/; echo gate=$?
probe tcp ` + up + `:80; echo direct=$?
while [ ! -e /project/ports ]; do sleep 0.1; done
h=${HTTP_PROXY##*@}
for p in $(cat /project/ports); do [ "$p" = "$port" ] && continue; probe tcp ${h%:*}:$p; echo other-$p=$?; done
echo own-port=$port`
	for b := 0; b < bursts; b++ {
		for _, u := range users {
			files, _ := filepath.Glob(filepath.Join(u.project, "port*"))
			for _, f := range files {
				os.Remove(f)
			}
		}
		start := time.Now()
		var wg sync.WaitGroup
		runs := make([]*running, sessions)
		startAll := make(chan struct{})
		for i, u := range users {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-startAll
				runs[i] = u.start(t, "run", "--allow", "allowed.test", "--harness", "shell", "--", "sh", "-c", script)
			}()
		}
		close(startAll) // the same instant
		wg.Wait()
		// Collect every session's port, then give each project the list.
		var ports []string
		ok := waitFor(2*time.Minute, func() bool {
			ports = nil
			for _, u := range users[:sessions-1] {
				files, _ := filepath.Glob(filepath.Join(u.project, "port-*"))
				for _, f := range files {
					// A file not yet written (the session's echo
					// creates it first) is read again next time.
					b, _ := os.ReadFile(f)
					if p := strings.TrimSpace(string(b)); p != "" {
						ports = append(ports, p)
					}
				}
			}
			return len(ports) == sessions || anyExited(runs)
		})
		if !ok || len(ports) != sessions {
			for i, r := range runs {
				if r.exited() {
					t.Errorf("burst %d session %d ended early: exit %d\n%s\n%s", b, i, r.code, r.stdout, r.stderr)
				}
			}
			t.Fatalf("burst %d: %d of %d sessions reported a gate port", b, len(ports), sessions)
		}
		for _, u := range users[:sessions-1] {
			writeUserFile(t, filepath.Join(u.project, "ports"), strings.Join(ports, " ")+"\n")
		}
		seen := map[string]bool{}
		for i, r := range runs {
			res := r.wait(t, 2*time.Minute)
			own := ""
			for _, l := range strings.Split(res.Stdout, "\n") {
				if p, ok := strings.CutPrefix(l, "own-port="); ok {
					own = p
				}
			}
			if res.Code != 0 || own == "" || seen[own] || !strings.Contains(res.Stdout, "gate=0") || !strings.Contains(res.Stdout, "direct=1") {
				t.Errorf("burst %d session %d (port %q): %s", b, i, own, res)
			}
			seen[own] = true
			for _, p := range ports {
				if p != own && !strings.Contains(res.Stdout, fmt.Sprintf("other-%s=1", p)) {
					t.Errorf("burst %d session %d reached another session's gate port %s: %s", b, i, p, res.Stdout)
				}
			}
		}
		for _, u := range users[:sessions-1] {
			os.Remove(filepath.Join(u.project, "ports"))
		}
		// Each session's watchdog removes its gate just after aisb exits.
		if !waitGone(t, 5*time.Second) {
			t.Fatalf("burst %d left containers: %v", b, sessionContainers(t))
		}
		for _, p := range ports {
			var n int
			fmt.Sscan(p, &n)
			if n > 0 && gate.Listening(n) {
				t.Errorf("burst %d: gate port %d still listens", b, n)
			}
		}
		t.Logf("burst %d: %d sessions in %s", b, sessions, time.Since(start).Round(time.Millisecond))
	}
	if waitFor(5*time.Second, func() bool { return findProcess("internal-watchdog") == 0 }); findProcess("internal-watchdog") != 0 {
		t.Errorf("a watchdog is still running")
	}
}

func anyExited(runs []*running) bool {
	for _, r := range runs {
		if r != nil && r.exited() {
			return true
		}
	}
	return false
}
