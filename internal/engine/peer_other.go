//go:build !linux

package engine

import (
	"fmt"
	"net"
	"runtime"
)

// peerCreds: only Linux says here who listens on a socket, and elsewhere
// (a Mac) Podman runs its containers in a VM whose socket is forwarded:
// never local.
func peerCreds(*net.UnixConn) (peerCred, error) {
	return peerCred{}, fmt.Errorf("aisb cannot tell who serves a unix socket on %s, where Podman runs in a machine (VM)", runtime.GOOS)
}
