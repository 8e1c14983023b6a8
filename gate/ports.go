package gate

import "net"

// choosePorts picks the gate's two ports on 127.0.0.1: the TLS port first,
// held by aisb where it can be (hold.go), so that it cannot be the front's
// port too; then the front, any other free port. Only a Podman of this uid
// (sameUser) runs squid as this uid, in this network, so only then is the
// TLS port held. On failure nothing is held.
func choosePorts(sameUser bool) (hold *portHold, port, tlsPort int, err error) {
	if sameUser {
		hold, tlsPort, err = holdPort()
	} else {
		tlsPort, err = freePort()
	}
	if err != nil {
		return nil, 0, 0, err
	}
	port, err = freePort()
	for err == nil && port == tlsPort {
		port, err = freePort()
	}
	if err != nil {
		hold.release()
		return nil, 0, 0, err
	}
	return hold, port, tlsPort, nil
}

// freePort asks the kernel for a free port on 127.0.0.1.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
