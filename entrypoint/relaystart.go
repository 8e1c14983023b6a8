package entrypoint

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/contract"
)

// The relay's inherited descriptors, in ExtraFiles order (3 onwards).
const (
	relayFdTCP = 3 + iota
	relayFdDNSUDP
	relayFdDNSTCP
	relayFdReady
)

// relayReady is what the relay writes on its ready pipe once it is
// hardened and its gate is known.
const relayReady = "ready\n"

// RelayWait bounds the relay's start, from fork to its probe answered.
const RelayWait = 5 * time.Second

// ErrRelay is wrapped by every reason the relay is not in place.
var ErrRelay = errors.New("the relay is not in place")

func relayErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRelay, fmt.Sprintf(format, args...))
}

// startedRelay is a relay started and not yet known to be ready.
type startedRelay struct {
	pid   int
	ready *os.File // the read end of its ready pipe
}

// startRelay binds the relay's sockets as root (ports below 1024, which the
// agent cannot bind) and starts `aisb-entrypoint relay` on them as RelayUID
// in a session of its own, without waiting for it: the relay's own start
// runs while the entrypoint installs the table, and wait says whether it
// came up. It runs on the locked thread, before the drop: the bounding set
// is emptied first so that the relay inherits none of it.
func (e *Entrypoint) startRelay() (*startedRelay, error) {
	if err := dropBounding(); err != nil {
		return nil, err
	}
	tcp, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(addrPort(contract.RelayTCP)))
	if err != nil {
		return nil, relayErr("listen on %s: %v", contract.RelayTCP, err)
	}
	defer tcp.Close()
	udp, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addrPort(contract.RelayDNS)))
	if err != nil {
		return nil, relayErr("listen on udp %s: %v", contract.RelayDNS, err)
	}
	defer udp.Close()
	dnsTCP, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(addrPort(contract.RelayDNS)))
	if err != nil {
		return nil, relayErr("listen on tcp %s: %v", contract.RelayDNS, err)
	}
	defer dnsTCP.Close()
	var files []*os.File
	for _, f := range []interface{ File() (*os.File, error) }{tcp, udp, dnsTCP} {
		fl, err := f.File()
		if err != nil {
			return nil, relayErr("%v", err)
		}
		defer fl.Close()
		files = append(files, fl)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, relayErr("%v", err)
	}
	self, err := os.Executable()
	if err != nil {
		r.Close()
		w.Close()
		return nil, relayErr("find this binary: %v", err)
	}
	if e.relayExe != "" {
		self = e.relayExe
	}
	// syscall.ForkExec rather than os/exec: os/exec's first start in a
	// process forks a child that exits at once, to learn whether pidfds
	// work, on the path of every sandbox's start.
	errFd := uintptr(2)
	if f, ok := e.stderr.(*os.File); ok {
		errFd = f.Fd()
	}
	fds := []uintptr{0, 1, errFd}
	for _, f := range append(files, w) {
		fds = append(fds, f.Fd())
	}
	pid, err := syscall.ForkExec(self, []string{self, "relay"}, &syscall.ProcAttr{
		Dir:   "/",
		Env:   os.Environ(),
		Files: fds,
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Credential: &syscall.Credential{Uid: contract.RelayUID, Gid: contract.RelayGID, Groups: []uint32{}},
		},
	})
	w.Close()
	if err != nil {
		r.Close()
		return nil, relayErr("start: %v", err)
	}
	// Never waited for: once the command is exec'd, it is its parent.
	return &startedRelay{pid: pid, ready: r}, nil
}

// wait returns the relay's pid once it said it is ready, within RelayWait
// of its start; otherwise it kills it.
func (s *startedRelay) wait() (int, error) {
	defer s.ready.Close()
	s.ready.SetReadDeadline(time.Now().Add(RelayWait))
	buf := make([]byte, len(relayReady))
	if _, err := io.ReadFull(s.ready, buf); err != nil || string(buf) != relayReady {
		syscall.Kill(s.pid, syscall.SIGKILL)
		return 0, relayErr("it did not report ready (pid %d): %v", s.pid, err)
	}
	return s.pid, nil
}

// kill stops a relay whose sandbox will not run its command.
func (s *startedRelay) kill() {
	syscall.Kill(s.pid, syscall.SIGKILL)
	s.ready.Close()
}

func addrPort(e contract.Endpoint) netip.AddrPort { return netip.AddrPortFrom(e.Addr, e.Port) }

// verifyRelay checks the relay from outside, before the exec: its ids are
// RelayUID's, it holds no capability, no_new_privs and a seccomp filter are
// set, and its resolver answers the probe name from the mapped range.
func verifyRelay(pid int) error {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return relayErr("%v", err)
	}
	defer f.Close()
	ids := func(n int) string { return fmt.Sprintf("%d\t%d\t%d\t%d", n, n, n, n) }
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2", "Uid": ids(contract.RelayUID), "Gid": ids(contract.RelayGID), "Groups": "",
	}
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		if w, ok := want[k]; ok {
			seen++
			if got := strings.TrimSpace(v); got != w {
				return relayErr("pid %d: %s is %q, want %q", pid, k, got, w)
			}
		}
	}
	if seen != len(want) {
		return relayErr("pid %d: its status lacks some of %d lines", pid, len(want))
	}
	a, err := probeResolver(contract.RelayDNS, contract.RelayProbeName)
	if err != nil {
		return relayErr("its resolver: %v", err)
	}
	if !contract.MappedRange.Contains(a) {
		return relayErr("its resolver answered %s for %s, outside %s", a, contract.RelayProbeName, contract.MappedRange)
	}
	return nil
}

// probeResolver asks server for name's A record over UDP.
func probeResolver(server contract.Endpoint, name string) (netip.Addr, error) {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0xa15b, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		return netip.Addr{}, err
	}
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(addrPort(server)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(RelayWait))
	if _, err := c.Write(q); err != nil {
		return netip.Addr{}, err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return netip.Addr{}, err
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		return netip.Addr{}, err
	}
	if m.ID != 0xa15b || len(m.Answers) != 1 {
		return netip.Addr{}, fmt.Errorf("reply id %#x with %d answers", m.ID, len(m.Answers))
	}
	ar, ok := m.Answers[0].Body.(*dnsmessage.AResource)
	if !ok {
		return netip.Addr{}, errors.New("the answer is not an A record")
	}
	return netip.AddrFrom4(ar.A), nil
}

// pointResolvConf writes the sandbox's resolv.conf, as root (the agent
// cannot change it afterwards), naming the relay's resolver only.
func pointResolvConf(path string) error {
	want := "nameserver " + contract.RelayDNS.Addr.String() + "\n"
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(want); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != want {
		return fmt.Errorf("%s reads %q after writing it: %v", path, b, err)
	}
	return nil
}

// checkLowPorts fails unless the agent, unprivileged, cannot bind the
// relay's ports: should the relay die, nothing of the agent's could take
// its place.
func checkLowPorts(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: %q", path, b)
	}
	if n <= int(contract.RelayTCP.Port) || n <= int(contract.RelayDNS.Port) {
		return fmt.Errorf("%s is %d: the agent could bind the relay's ports %d and %d (aisb sets it to 1024)", path, n, contract.RelayDNS.Port, contract.RelayTCP.Port)
	}
	return nil
}

// dropBounding empties this thread's bounding set (CAP_SETPCAP, so while
// still root); the relay forked from this thread inherits it empty.
func dropBounding() error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}
