package relay

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/entrypoint/tunnel"
)

// echoGate answers every CONNECT with 200 and then echoes what it reads:
// a gate and an upstream in one, on loopback.
func echoGate(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					l, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if l == "\r\n" {
						break
					}
				}
				io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				io.Copy(c, br)
			}()
		}
	}()
	return ln.Addr().String()
}

// exchange is a new connection's life after its tunnel is up: two round
// trips of a TLS handshake's size, then a request and its answer.
func exchange(b *testing.B, c net.Conn) {
	msg := make([]byte, 600)
	for i := 0; i < 3; i++ {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
}

// BenchmarkNewConnection: one connection through the relay (accept, its
// CONNECT through the gate, the copy both ways), against the same
// connection's CONNECT made by the client itself (the proxy path).
func BenchmarkNewConnection(b *testing.B) {
	gate := echoGate(b)
	b.Run("proxy", func(b *testing.B) {
		g := tunnel.Gate{Addr: gate, Auth: "Basic dG9rZW4="}
		for i := 0; i < b.N; i++ {
			c, err := tunnel.Dial(g, "tp.test:443", GateTimeout)
			if err != nil {
				b.Fatal(err)
			}
			exchange(b, c)
		}
	})
	b.Run("relay", func(b *testing.B) {
		m := NewMap(contract.MappedRange)
		a, _ := m.Address("tp.test")
		r := &Relay{Map: m, Gate: tunnel.Gate{Addr: gate, Auth: "Basic dG9rZW4="},
			Dst: func(*net.TCPConn) (netip.AddrPort, error) { return netip.AddrPortFrom(a, 443), nil }}
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ln.Close() })
		go r.Serve(ln)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			exchange(b, c)
		}
	})
}
