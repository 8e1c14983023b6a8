package live

import "golang.org/x/sys/unix"

// peerCred is the kernel's word on the socket's other end: its effective
// uid (LOCAL_PEERCRED) and pid (LOCAL_PEERPID).
func peerCred(fd int) (peer, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return peer{}, err
	}
	pid, err := unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID)
	if err != nil {
		return peer{}, err
	}
	return peer{uid: int(cred.Uid), pid: pid}, nil
}
