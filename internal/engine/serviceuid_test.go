package engine

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestServiceUID: the uid owning a service's unix socket is the service's
// user; a URI that is not a local socket has none; SameUser needs this
// process's own non-root uid.
func TestServiceUID(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "podman.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := &Conn{URI: "unix://" + sock}
	uid, ok := c.ServiceUID()
	if !ok || uid != os.Geteuid() {
		t.Fatalf("ServiceUID of our own socket: %d %t, want %d", uid, ok, os.Geteuid())
	}
	if got, want := c.SameUser(), os.Geteuid() != 0; got != want {
		t.Errorf("SameUser of our own socket as uid %d: %t, want %t", os.Geteuid(), got, want)
	}
	if os.Geteuid() == 0 {
		// Another user's socket (the tests' root using the test user's).
		if err := os.Lchown(sock, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if uid, ok := c.ServiceUID(); !ok || uid != 4242 {
			t.Errorf("ServiceUID of uid 4242's socket: %d %t", uid, ok)
		}
		if c.SameUser() {
			t.Error("SameUser of another user's socket")
		}
	}
	for _, uri := range []string{"ssh://me@box/run/podman/podman.sock", "tcp://127.0.0.1:8080", "unix://" + sock + ".missing"} {
		c := &Conn{URI: uri}
		if _, ok := c.ServiceUID(); ok || c.SameUser() {
			t.Errorf("%s: a service uid where none can be known", uri)
		}
	}
}
