package tests

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// serveUnix listens on a UNIX socket (a path, or @NAME for an abstract one)
// as the test user's own service would, greets each connection and counts
// them.
func serveUnix(t *testing.T, addr string) *atomic.Int32 {
	t.Helper()
	ln, err := net.Listen("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if !strings.HasPrefix(addr, "@") {
		u, _ := user.Lookup(testhost.User)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(addr, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Write([]byte("host-service\n"))
			c.Close()
		}
	}()
	return &n
}

// TestProjectSockets: a service of the user listening on a socket file
// inside the project is reachable from the sandbox (the table sees IP only),
// so aisb lists such files, quoted, and refuses to start unless
// --allow-project-sockets; with it, the agent does connect (the measured
// limit). Control: the host reaches the socket, and the project without it
// starts.
func TestProjectSockets(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), "")
	probe := testhost.Binary(t, "tests/probe")
	dir := filepath.Join(a.project, "tmp", "sockets")
	writeUserFile(t, filepath.Join(dir, ".keep"), "")
	sock := filepath.Join(dir, "db.sock")
	hits := serveUnix(t, sock)
	odd := filepath.Join(a.project, "odd\x1b[2Jname.sock")
	serveUnix(t, odd)

	// Control: the user reaches the service on the host.
	if r := testhost.Run(t, testhost.UserCommand(t.Context(), probe, "unix", sock)); r.Code != 0 {
		t.Fatalf("control: the host cannot reach its own socket: %s", r)
	}
	hits.Store(0)

	connect := []string{"--harness", "shell", "--", "probe", "unix", "/project/tmp/sockets/db.sock"}
	r := a.run(t, append([]string{"run"}, connect...)...)
	if r.Code == 0 || strings.Contains(r.Stdout, "connected") || hits.Load() != 0 {
		t.Errorf("started with sockets in the project (%d connections): %s", hits.Load(), r)
	}
	for _, want := range []string{`"tmp/sockets/db.sock"`, `"odd\x1b[2Jname.sock"`, "2 UNIX socket files", "--allow-project-sockets"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("refusal lacks %q: %s", want, r.Stderr)
		}
	}
	if strings.Contains(r.Stderr, "odd\x1b[2J") {
		t.Errorf("a raw escape from a file name reached the terminal: %q", r.Stderr)
	}

	// With the flag the agent reaches the host's service: the limit itself.
	r = a.run(t, append([]string{"run", "--allow-project-sockets"}, connect...)...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "host-service") || hits.Load() != 1 {
		t.Errorf("with --allow-project-sockets (%d connections): %s", hits.Load(), r)
	}
	if !strings.Contains(r.Stderr, `"tmp/sockets/db.sock"`) {
		t.Errorf("the sockets were not listed with --allow-project-sockets: %s", r.Stderr)
	}

	// Control: without socket files the same project starts.
	os.Remove(sock)
	os.Remove(odd)
	if r := a.run(t, "run", "--harness", "shell", "--", "true"); r.Code != 0 {
		t.Errorf("control: the project without sockets did not start: %s", r)
	}
}

// TestAbstractSocketsStayOnTheHost: abstract UNIX sockets belong to a network
// namespace, and every mode gives the sandbox its own, so a host service on
// one is out of reach. Control: the host reaches it.
func TestAbstractSocketsStayOnTheHost(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), "")
	probe := testhost.Binary(t, "tests/probe")
	b := make([]byte, 6)
	rand.Read(b)
	name := "@aisb-test-" + hex.EncodeToString(b)
	hits := serveUnix(t, name)
	if r := testhost.Run(t, testhost.UserCommand(t.Context(), probe, "unix", name)); r.Code != 0 {
		t.Fatalf("control: the host cannot reach its abstract socket: %s", r)
	}
	hits.Store(0)
	for _, mode := range []string{"allow", "none", "open"} {
		r := a.run(t, "run", "--net", mode, "--harness", "shell", "--", "probe", "unix", name)
		if r.Code != 1 || !strings.Contains(r.Stdout, "blocked") {
			t.Errorf("mode %s: %s", mode, r)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the host's abstract socket got %d connections from sandboxes", n)
	}
}
