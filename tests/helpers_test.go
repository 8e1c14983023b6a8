package tests

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// helper is one rootless network helper and how the sandbox sees the host's loopback.
type helper struct {
	name    string
	network string // podman --network value
	mapped  string // the host's 127.0.0.1 as seen from the container
}

var helpers = []helper{
	{"pasta", "pasta:--map-host-loopback,100.64.0.1", "100.64.0.1"},
	{"slirp4netns", "slirp4netns:allow_host_loopback=true", "10.0.2.2"},
}

// listenLoopback serves a greeting on a free port of the host's 127.0.0.1
// until the test ends, and returns the port.
func listenLoopback(t *testing.T, greeting string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(greeting + "\n"))
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func writePolicy(t *testing.T, p contract.Policy) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(testhost.AgentDir(t), "policy.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// plainRun runs the probe in a rootless container with no sandbox: the control.
func plainRun(t *testing.T, h helper, probe string, args ...string) testhost.Result {
	t.Helper()
	return testhost.Podman(t, append([]string{"run", "--rm", "--network=" + h.network,
		"-v", probe + ":/probe:ro", testhost.BaseImage, "/probe"}, args...)...)
}

// parallel lets t run alongside the other parallel tests, once every
// sequential test of the package has ended (Go runs those first, one at a
// time). The machine is mostly idle while a session starts or a build
// waits, so CI takes far less time this way. A test may call it only if it
// looks at nothing but its own: its aisbUser's directories, its sessions'
// containers by their session label, paths and names at the test upstream
// that no other test uses. A test stays sequential when it lists every
// aisb container or process, stops or shares a Podman service or the
// upstream's SSH key, counts on a limit that all of the test user's
// processes share (nproc), depends on a timing that load can stretch (a
// key typed into a terminal, a kill at a chosen moment, a deadline of a
// second or less), or is itself a stress test; such a test is named in
// tests/alone, and `make test` (tests/run.sh) runs those one at a time as
// the second test user, beside the parallel ones, three at once
// (-parallel 3), as the first. A stress test of Podman rather than of
// aisb goes to `make stress` (the stress build tag) instead.
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
	slots.acquire(t)
}
