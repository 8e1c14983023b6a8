// Package tunnel carries one byte stream through the gate with HTTP CONNECT:
// the sandbox's ssh ProxyCommand (aisb-entrypoint connect HOST PORT).
package tunnel

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrRefused is wrapped by every *RefusedError.
var ErrRefused = errors.New("the gate refused the tunnel")

// RefusedError is the gate's answer when it was not 200.
type RefusedError struct {
	Target string // host:port asked for
	Status string // the gate's status line, printable ASCII only
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the gate refused %s: %s", e.Target, e.Status)
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// ErrTarget is returned for a host or port that cannot be asked for.
var ErrTarget = errors.New("invalid target")

// proxyVars are read in this order for the gate's address; aisb sets them
// all to the same http://aisb:TOKEN@ADDR:PORT in a session with a gate.
var proxyVars = []string{"https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"}

// Gate is where the session's gate listens, and what proves to it that a
// request comes from its own sandbox.
type Gate struct {
	Addr string // host:port; "" in a session without a gate
	// Auth is the Proxy-Authorization value for the proxy URL's user and
	// password ("Basic ..."), or "" when the URL has none.
	Auth string
}

// GateFromEnv returns the gate from the proxy variables, or the zero Gate
// when none is set (a session without a gate: open, no-gate, none).
func GateFromEnv(getenv func(string) string) (Gate, error) {
	for _, k := range proxyVars {
		v := getenv(k)
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || u.Scheme != "http" || u.Host == "" || u.Port() == "" {
			// The value holds the gate's token: never echoed.
			return Gate{}, fmt.Errorf("%s: want http://[USER:PASSWORD@]ADDRESS:PORT", k)
		}
		g := Gate{Addr: u.Host}
		if u.User != nil {
			pw, _ := u.User.Password()
			g.Auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw))
		}
		return g, nil
	}
	return Gate{}, nil
}

// Target checks host and port as ssh hands them over (%h %p) and returns
// host:port. Only characters a host name or an address can hold pass, so
// nothing can be injected into the CONNECT request.
func Target(host, port string) (string, error) {
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != port {
		return "", fmt.Errorf("%w: port %q: want a number from 1 to 65535", ErrTarget, port)
	}
	if host == "" || len(host) > 253 {
		return "", fmt.Errorf("%w: host %q", ErrTarget, host)
	}
	for _, r := range host {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:", r)
		if !ok {
			return "", fmt.Errorf("%w: host %q: only letters, digits, '.', '-', '_' and ':' are allowed", ErrTarget, host)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// Dial opens target (host:port) through the gate with CONNECT, proving the
// sandbox with the gate's token, or directly when the session has no gate.
// The returned connection reads what the target sends, including anything
// the gate passed on with its reply.
func Dial(gate Gate, target string, timeout time.Duration) (net.Conn, error) {
	if gate.Addr == "" {
		c, err := net.DialTimeout("tcp", target, timeout)
		if err != nil {
			return nil, fmt.Errorf("connect to %s directly (this session has no gate): %w", target, err)
		}
		return c, nil
	}
	c, err := net.DialTimeout("tcp", gate.Addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("connect to the gate at %s: %w", gate.Addr, err)
	}
	c.SetDeadline(time.Now().Add(timeout))
	auth := ""
	if gate.Auth != "" {
		auth = "Proxy-Authorization: " + gate.Auth + "\r\n"
	}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, auth); err != nil {
		c.Close()
		return nil, fmt.Errorf("ask the gate for %s: %w", target, err)
	}
	br := bufio.NewReader(c)
	tp := textproto.NewReader(br)
	status, err := tp.ReadLine()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("read the gate's reply for %s: %w", target, err)
	}
	if _, err := tp.ReadMIMEHeader(); err != nil {
		c.Close()
		return nil, fmt.Errorf("read the gate's reply for %s: %w", target, err)
	}
	f := strings.Fields(status)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") || f[1] != "200" {
		c.Close()
		return nil, &RefusedError{Target: target, Status: printable(status)}
	}
	c.SetDeadline(time.Time{})
	return &bufConn{Conn: c, r: br}, nil
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// Pipe copies in to c and c to out until c has nothing more to send. When in
// ends first, c's sending side is closed and its replies are still read.
// Between two TCP sockets (the relay's case) the kernel splices the bytes
// (io.Copy: *net.TCPConn's ReadFrom takes a TCP source): the gate's
// connection is given as its socket, not as the reader that read the
// gate's reply, unless that reader still holds bytes of the tunnel.
func Pipe(c net.Conn, in io.Reader, out io.Writer) error {
	go func() {
		io.Copy(underlying(c), in)
		if tc, ok := underlying(c).(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	src := io.Reader(c)
	if b, ok := c.(*bufConn); ok && b.r.Buffered() == 0 {
		src = b.Conn
	}
	_, err := io.Copy(out, src)
	c.Close()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("tunnel: %w", err)
	}
	return nil
}

func underlying(c net.Conn) net.Conn {
	if b, ok := c.(*bufConn); ok {
		return b.Conn
	}
	return c
}

func printable(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	if len(b) > 120 {
		b = b[:120]
	}
	return string(b)
}

// Main is `aisb-entrypoint connect HOST PORT`: ssh's ProxyCommand. It
// returns the exit status; what went wrong is said on stderr.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		io.WriteString(stderr, "usage: aisb-entrypoint connect HOST PORT (ssh's ProxyCommand: connect %h %p)\n")
		return 64
	}
	target, err := Target(args[0], args[1])
	if err != nil {
		fmt.Fprintf(stderr, "aisb: connect: %v\n", err)
		return 64
	}
	gate, err := GateFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "aisb: connect: %v\n", err)
		return 1
	}
	c, err := Dial(gate, target, 30*time.Second)
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		fmt.Fprintf(stderr, "aisb: %v\n", err)
		fmt.Fprintf(stderr, "aisb: SSH leaves only to port 22 of the hosts listed for it, never to an internal address;"+
			" to list %s: aisb run --allow-ssh %s, or network.ssh_hosts (`aisb audit --blocked` on the host says why)\n", args[0], args[0])
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "aisb: %v\n", err)
		return 1
	}
	if err := Pipe(c, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "aisb: %v\n", err)
		return 1
	}
	return 0
}
