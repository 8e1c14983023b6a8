package main

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// family is one socket family and the socket type and protocol its kernel
// module accepts, so that opening it succeeds wherever the family exists.
type family struct {
	num, typ, proto int
}

var families = map[string]family{
	"unix":      {unix.AF_UNIX, unix.SOCK_STREAM, 0},
	"inet":      {unix.AF_INET, unix.SOCK_STREAM, 0},
	"inet6":     {unix.AF_INET6, unix.SOCK_STREAM, 0},
	"netlink":   {unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
	"vsock":     {unix.AF_VSOCK, unix.SOCK_STREAM, 0},
	"packet":    {unix.AF_PACKET, unix.SOCK_DGRAM, 0},
	"xdp":       {unix.AF_XDP, unix.SOCK_RAW, 0},
	"alg":       {unix.AF_ALG, unix.SOCK_SEQPACKET, 0},
	"key":       {unix.AF_KEY, unix.SOCK_RAW, 2}, // PF_KEY_V2
	"bluetooth": {unix.AF_BLUETOOTH, unix.SOCK_RAW, 1},
	"can":       {unix.AF_CAN, unix.SOCK_RAW, 1},
	"tipc":      {unix.AF_TIPC, unix.SOCK_RDM, 0},
	"rds":       {unix.AF_RDS, unix.SOCK_SEQPACKET, 0},
	"llc":       {unix.AF_LLC, unix.SOCK_DGRAM, 0},
	"ax25":      {unix.AF_AX25, unix.SOCK_SEQPACKET, 0},
	"nfc":       {unix.AF_NFC, unix.SOCK_SEQPACKET, 0},
	"qipcrtr":   {unix.AF_QIPCRTR, unix.SOCK_DGRAM, 0},
	"mctp":      {unix.AF_MCTP, unix.SOCK_DGRAM, 0},
}

// probeFamily opens (and at once closes) one socket of the named family.
// Nothing is bound, connected or sent.
func probeFamily(name string) error {
	f, ok := families[name]
	if !ok {
		usage()
	}
	fd, err := unix.Socket(f.num, f.typ|unix.SOCK_CLOEXEC, f.proto)
	if err != nil {
		return errnoErr(err)
	}
	unix.Close(fd)
	fmt.Printf("opened %s socket\n", name)
	return nil
}

// probeFamilies tries every family number below AF_MAX with each common
// socket type and prints "N opened" or "N ERRNO" (the last error) per line.
// It opens and closes sockets only.
func probeFamilies() error {
	types := []int{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_RAW, unix.SOCK_SEQPACKET, unix.SOCK_RDM}
	for n := 0; n < unix.AF_MAX; n++ {
		result := ""
		for _, typ := range types {
			fd, err := unix.Socket(n, typ|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
				result = "opened"
				break
			}
			result = errnoErr(err).Error()
		}
		fmt.Printf("%d %s\n", n, result)
	}
	return nil
}

func errnoErr(err error) error {
	var e syscall.Errno
	if errors.As(err, &e) {
		return errors.New(unix.ErrnoName(e))
	}
	return err
}

// probeSocketpair sends one message across a UNIX socketpair.
func probeSocketpair() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return errnoErr(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if _, err := unix.Write(fds[0], []byte("pair")); err != nil {
		return err
	}
	buf := make([]byte, 8)
	n, err := unix.Read(fds[1], buf)
	if err != nil {
		return err
	}
	fmt.Printf("socketpair carried %q\n", buf[:n])
	return nil
}

// probeNetlinkRoute dumps the links over a NETLINK_ROUTE socket (to the
// kernel only).
func probeNetlinkRoute() error {
	b, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	if err != nil {
		return errnoErr(err)
	}
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return err
	}
	fmt.Printf("netlink route: %d messages\n", len(msgs))
	return nil
}

// probeIOUring sets up (and closes) an io_uring instance of one entry.
func probeIOUring() error {
	var params [120]byte // struct io_uring_params, zeroed
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
	if e != 0 {
		return errnoErr(e)
	}
	unix.Close(int(fd))
	fmt.Println("io_uring set up")
	return nil
}

// probeUnix connects to a UNIX socket (a path, or @NAME for an abstract
// one) and prints its greeting.
func probeUnix(addr string) error {
	c, err := net.DialTimeout("unix", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(timeout))
	n, _ := c.Read(buf)
	fmt.Printf("connected %q %q\n", addr, buf[:n])
	return nil
}
