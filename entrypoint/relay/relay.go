// Package relay is a transparent sandbox's way out for programs that ignore
// the proxy variables: a resolver that maps every name the agent asks for to
// an address of a reserved range (and never asks anyone), and a TCP relay
// that takes the agent's connections to those addresses (the table redirects
// them here) and carries each to the gate by the name its address was given
// for, with the sandbox's token. The gate decides as for any proxied request.
// The entrypoint starts it, as its own user, before the privilege drop.
package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/entrypoint/tunnel"
)

// GateTimeout bounds the gate's answer to one connection: an ask-mode
// question waits up to network.ask_timeout (30 s) for the user.
const GateTimeout = 60 * time.Second

// ErrNotMapped: the connection's original destination is no address the
// resolver gave out (an IP literal): refused with a reset.
var ErrNotMapped = errors.New("destination is not a mapped address")

// Relay carries redirected connections to the gate.
type Relay struct {
	Map  *Map
	Gate tunnel.Gate
	// Dst returns a redirected connection's original destination;
	// OriginalDst in production.
	Dst func(*net.TCPConn) (netip.AddrPort, error)
}

// Serve handles every connection ln accepts until ln is closed.
func (r *Relay) Serve(ln *net.TCPListener) error {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		go r.handle(c)
	}
}

// reset closes c with a TCP reset: the program sees "connection refused"
// or "reset by peer" at once, never a hang.
func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

func (r *Relay) handle(c *net.TCPConn) {
	dst, err := r.Dst(c)
	if err != nil {
		reset(c)
		return
	}
	name, ok := r.Map.Name(dst.Addr())
	if !ok {
		reset(c)
		return
	}
	port := strconv.Itoa(int(dst.Port()))
	if dst.Port() == 80 {
		r.plainHTTP(c, name)
		return
	}
	// Every other port is a CONNECT to the same name and port: the gate
	// admits 443 (and 22 for SSH hosts) and refuses, audited, the rest.
	up, err := tunnel.Dial(r.Gate, net.JoinHostPort(name, port), GateTimeout)
	if err != nil {
		reset(c)
		return
	}
	pipe(c, up)
}

// plainHTTP reads one request from c and sends it to the gate in proxy
// (absolute) form for http://NAME/..., whatever Host the program sent, then
// copies the gate's answer back (its refusals included: a 403 with the
// gate's hint) and closes: one request per connection.
func (r *Relay) plainHTTP(c *net.TCPConn, name string) {
	defer c.Close()
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(GateTimeout))
	req, err := http.ReadRequest(br)
	if err != nil {
		reset(c)
		return
	}
	c.SetReadDeadline(time.Time{})
	req.URL.Scheme, req.URL.Host, req.Host = "http", name, name
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	if r.Gate.Auth != "" {
		req.Header.Set("Proxy-Authorization", r.Gate.Auth)
	}
	req.Close = true
	up, err := net.DialTimeout("tcp", r.Gate.Addr, 10*time.Second)
	if err != nil {
		reset(c)
		return
	}
	defer up.Close()
	if err := req.WriteProxy(up); err != nil {
		reset(c)
		return
	}
	io.Copy(c, up)
}

// pipe copies both ways: the program's end of sending is passed on as a
// half close, and once the gate's side is done, so is the connection.
func pipe(c *net.TCPConn, up net.Conn) {
	tunnel.Pipe(up, c, c)
	c.Close()
}

// OriginalDst is the destination c was opened for before the table
// redirected it (SO_ORIGINAL_DST).
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var mreq *unix.IPv6Mreq
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		// struct sockaddr_in, read through the 16-byte mreq type.
		mreq, gerr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	}); err != nil {
		return netip.AddrPort{}, err
	}
	if gerr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", gerr)
	}
	b := mreq.Multiaddr
	port := binary.BigEndian.Uint16(b[2:4])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
}
