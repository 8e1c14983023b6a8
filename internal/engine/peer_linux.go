package engine

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerCreds reads who listens on conn's socket: SO_PEERCRED, which the
// kernel recorded when the listener called listen(2).
func peerCreds(conn *net.UnixConn) (peerCred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return peerCred{}, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peerCred{}, err
	}
	if gerr != nil {
		return peerCred{}, fmt.Errorf("SO_PEERCRED: %w", gerr)
	}
	return peerCred{PID: int(cred.Pid), UID: int(cred.Uid)}, nil
}
