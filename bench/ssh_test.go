package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// BenchmarkSSHEngine: what reaching Podman over ssh:// adds to start-up
// (issue #29), against the same service reached on its unix socket, in
// alternated pairs: one Podman service (the engine user's, in the engine
// host's namespace, tests/host/engine-ssh.sh), the same user, the same
// container; only the way to the API differs. Two figures: Connect and
// Close alone, and Connect + one trivial container (create, start, wait,
// remove) + Close (tests/sshengine -do pairs).
func BenchmarkSSHEngine(b *testing.B) {
	name := cmp.Or(os.Getenv("AISB_ENGINE_SSH_USER"), "aisbengine2")
	const what, whatRun = "Connect over ssh:// (same service as local)", "Connect + a trivial container over ssh:// (same service)"
	eu, err := osuser.Lookup(name)
	hostKey, kerr := os.ReadFile(filepath.Join(testhost.EngineSSHDir, "host_ed25519.pub"))
	if err != nil || kerr != nil {
		why := fmt.Sprintf("no engine host (tests/host/engine-ssh.sh up): %v %v", err, kerr)
		notMeasured(partStartup, what, "unix socket", noGoal, why)
		notMeasured(partStartup, whatRun, "unix socket", noGoal, why)
		return
	}
	uid, _ := strconv.Atoi(eu.Uid)
	gid, _ := strconv.Atoi(eu.Gid)
	dir, err := os.MkdirTemp("", "aisb-bench-ssh-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	key := filepath.Join(dir, "id")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		b.Fatalf("ssh-keygen: %v %s", err, out)
	}
	known := filepath.Join(dir, "known_hosts")
	os.WriteFile(known, []byte(testhost.EngineSSHAddr+" "+strings.TrimSpace(string(hostKey))+"\n"), 0o644)
	for _, f := range []string{dir, key, key + ".pub", known} {
		os.Chown(f, uid, gid)
	}
	pub, _ := os.ReadFile(key + ".pub")
	testhost.AuthorizeEngineKey(b, name, string(pub))
	sock := "/run/user/" + eu.Uid + "/podman/podman.sock"
	bin := testhost.Binary(b, "tests/sshengine")
	pairs := func(n int, more ...string) (local, ssh, diff float64) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		args := append([]string{"-u", name, "--", "env", "-i", "HOME=" + eu.HomeDir, "XDG_RUNTIME_DIR=/run/user/" + eu.Uid,
			"PATH=/usr/local/bin:/usr/bin:/bin", "CONTAINER_SSHKEY=" + key, "AISB_SSH_KNOWN_HOSTS=" + known,
			bin, "-do", "pairs", "-n", strconv.Itoa(n), "-local", "unix://" + sock,
			"-uri", fmt.Sprintf("ssh://%s@%s%s", name, testhost.EngineSSHAddr, sock),
			"-runtime-dir", "/run/user/" + eu.Uid, "-image", testhost.BaseImage}, more...)
		cmd := exec.CommandContext(ctx, "runuser", args...)
		cmd.Dir = "/"
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("tests/sshengine -do pairs: %v %s", err, out)
		}
		var p struct{ LocalMedian, SSHMedian, DiffMedian float64 }
		if err := json.Unmarshal(out, &p); err != nil {
			b.Fatalf("tests/sshengine: %v: %s", err, out)
		}
		return p.LocalMedian, p.SSHMedian, p.DiffMedian
	}
	for _, row := range []struct {
		what string
		n    int
		more []string
	}{{what, 3 * runs, []string{"-connect-only"}}, {whatRun, 2 * runs, nil}} {
		local, ssh, diff := pairs(row.n, row.more...)
		report(figure{part: partStartup, what: row.what, measured: fmt.Sprintf("%.1f ms (each pair: +%.1f ms)", ssh, diff),
			baseline: fmt.Sprintf("unix socket: %.1f ms", local), ratio: ssh / local, goal: noGoal, value: ssh / local})
	}
}
