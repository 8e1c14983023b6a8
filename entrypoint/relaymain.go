package entrypoint

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/entrypoint/relay"
	"github.com/aisb-dev/aisb/entrypoint/tunnel"
)

// RelayMain is `aisb-entrypoint relay`, started by startRelay as RelayUID
// with its sockets on descriptors 3 to 5 and its ready pipe on 6. Before it
// says ready: no_new_privs, not dumpable (no /proc/PID/mem, no core, no
// ptrace even by its own uid), the socket filter on every thread; and the
// gate, from the proxy variables. It returns only on failure.
func RelayMain(stderr io.Writer) int {
	runtime.LockOSThread()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "aisb-entrypoint relay: %v\n", err)
		return ExitEnforce
	}
	if os.Getuid() != contract.RelayUID || os.Geteuid() != contract.RelayUID {
		return fail(fmt.Errorf("running as uid %d, want %d (only the entrypoint starts the relay)", os.Getuid(), contract.RelayUID))
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return fail(fmt.Errorf("clear capability sets: %w", err))
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("set no_new_privs: %w", err))
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("set not dumpable: %w", err))
	}
	if err := restrictSocketsAllThreads(); err != nil {
		return fail(err)
	}
	gate, err := tunnel.GateFromEnv(os.Getenv)
	if err != nil {
		return fail(err)
	}
	if gate.Addr == "" {
		return fail(errors.New("no gate in the proxy variables"))
	}
	tcp, err := net.FileListener(os.NewFile(relayFdTCP, "relay"))
	if err != nil {
		return fail(err)
	}
	udp, err := net.FilePacketConn(os.NewFile(relayFdDNSUDP, "resolver-udp"))
	if err != nil {
		return fail(err)
	}
	dnsTCP, err := net.FileListener(os.NewFile(relayFdDNSTCP, "resolver-tcp"))
	if err != nil {
		return fail(err)
	}
	m := relay.NewMap(contract.MappedRange)
	res := &relay.Resolver{Map: m}
	rl := &relay.Relay{Map: m, Gate: gate, Dst: relay.OriginalDst}
	errs := make(chan error, 3)
	go func() { errs <- res.ServeUDP(udp) }()
	go func() { errs <- res.ServeTCP(dnsTCP) }()
	go func() { errs <- rl.Serve(tcp.(*net.TCPListener)) }()
	ready := os.NewFile(relayFdReady, "ready")
	if _, err := io.WriteString(ready, relayReady); err != nil {
		return fail(err)
	}
	ready.Close()
	return fail(<-errs)
}
