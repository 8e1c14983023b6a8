package engine

import (
	"runtime"
	"testing"
)

// TestHostArch: a Podman of this Linux host (found, or a unix socket) is
// of this host's architecture without a call; ssh:// and tcp:// are asked
// (Conn.Arch), and so is everything on a host that is not Linux.
func TestHostArch(t *testing.T) {
	for _, c := range []struct {
		uri   string
		known bool
	}{
		{"", true},
		{"unix:///run/user/1000/podman/podman.sock", true},
		{"ssh://core@127.0.0.1:2222/run/user/1000/podman/podman.sock", false},
		{"tcp://127.0.0.1:8080", false},
	} {
		arch, known := HostArch(Where{URI: c.uri})
		want := c.known && runtime.GOOS == "linux"
		if known != want || (known && arch != runtime.GOARCH) {
			t.Errorf("HostArch(%q) = %q, %v; want known %v", c.uri, arch, known, want)
		}
	}
}
