package live

import "golang.org/x/sys/unix"

// peerCred is the kernel's word on the socket's other end (SO_PEERCRED).
func peerCred(fd int) (peer, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return peer{}, err
	}
	return peer{uid: int(cred.Uid), pid: int(cred.Pid)}, nil
}
