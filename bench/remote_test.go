package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	osuser "os/user"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// BenchmarkRemoteStartup: `aisb run -- true` on another user's rootless
// Podman (CONTAINER_HOST=unix://…, everything through its API, the project
// copied) against the same run on the user's own service, in allow and
// none modes, interleaved so every case sees the same machine. No goal: it
// says what the API path costs (docs/remote.md).
func BenchmarkRemoteStartup(b *testing.B) {
	u := newUser(b)
	local := testhost.Service(b)
	remote := engineService(b)
	run := func(uri string, args ...string) func() (string, error) {
		return func() (string, error) {
			_, stderr, err := u.output(uri, append(append([]string{"run", "--harness", "shell"}, args...), "--", "true")...)
			return stderr, err
		}
	}
	cases := []startCase{
		{"local-allow", run(local)},
		{"remote-allow", run(remote)},
		{"local-none", run(local, "--net", "none")},
		{"remote-none", run(remote, "--net", "none")},
	}
	times := map[string][]time.Duration{}
	for i := -1; i < startRuns; i++ { // run -1 warms up (and builds the images on the engine)
		for _, c := range cases {
			settle(b)
			start := time.Now()
			if _, err := c.run(); err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
			if i >= 0 {
				times[c.name] = append(times[c.name], time.Since(start))
			}
		}
	}
	for _, m := range []string{"allow", "none"} {
		r, l := median(times["remote-"+m]), median(times["local-"+m])
		report(figure{part: partStartup, what: fmt.Sprintf("start-up, `aisb run --net %s -- true` on another user's Podman (through its API, the project copied, a review session)", m),
			measured: fmtMs(r), baseline: fmt.Sprintf("the same on the user's own service: %s", fmtMs(l)), ratio: float64(r) / float64(l), goal: noGoal, value: float64(r) / float64(l)})
	}
}

// engineService starts the engine user's rootless Podman service
// ($AISB_ENGINE_USER, tests/host/setup.sh's) on a socket of its own in
// $AISB_ENGINE_SOCKETS, open to the test user, with the base image loaded
// into its storage when it lacks it; stopped when b ends.
func engineService(b *testing.B) string {
	b.Helper()
	name := cmp.Or(os.Getenv("AISB_ENGINE_USER"), "aisbengine")
	dir := cmp.Or(os.Getenv("AISB_ENGINE_SOCKETS"), "/run/aisb-engine")
	eu, err := osuser.Lookup(name)
	if err != nil {
		testhost.Skip(b, "engine user %s missing (run tests/host/setup.sh): %v", name, err)
	}
	as := func(argv ...string) *exec.Cmd {
		env := []string{"HOME=" + eu.HomeDir, "USER=" + eu.Username, "XDG_RUNTIME_DIR=/run/user/" + eu.Uid,
			"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "PODMAN_IGNORE_CGROUPSV1_WARNING=1"}
		cmd := exec.Command("runuser", append(append([]string{"-u", eu.Username, "--", "env", "-i"}, env...), argv...)...)
		cmd.Dir = "/"
		return cmd
	}
	if err := as("podman", "image", "exists", testhost.BaseImage).Run(); err != nil {
		save := testhost.UserCommand(context.Background(), "podman", "save", testhost.BaseImage)
		load := as("podman", "load", "-q")
		pipe, err := save.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		load.Stdin = pipe
		if err := save.Start(); err != nil {
			b.Fatal(err)
		}
		out, err := load.CombinedOutput()
		if werr := save.Wait(); err != nil || werr != nil {
			b.Fatalf("load %s into %s's storage: %v %v: %s", testhost.BaseImage, name, err, werr, out)
		}
	}
	sock := fmt.Sprintf("%s/bench-%d-%d.sock", dir, os.Getpid(), time.Now().UnixNano())
	cmd := as("podman", "system", "service", "--time=0", "unix://"+sock)
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s's podman service: %v", name, err)
	}
	b.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait(); os.Remove(sock) })
	if err := testhost.WaitFor(time.Minute, func() error { _, err := os.Stat(sock); return err }); err != nil {
		b.Fatalf("%s's podman service socket did not appear: %v", name, err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		b.Fatal(err)
	}
	return "unix://" + sock
}
