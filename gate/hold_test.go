package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/gate/audit"
)

// dialFrom connects to 127.0.0.1:port from src and waits until the other
// end has closed the connection (the hold closes what it accepts, after
// noting it).
func dialFrom(t *testing.T, src string, port int) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	defer c.Close()
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("read from the hold: %v", err)
	}
}

func listenShared(port int, reuse bool) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			if reuse {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(port))
}

// TestHoldSeesSquidsCheck: only a connection from audit.SelfAddr counts as squid's
// check of its TLS port; another loopback client does not.
func TestHoldSeesSquidsCheck(t *testing.T) {
	h, port, err := holdPort()
	if err != nil {
		t.Fatal(err)
	}
	defer h.release()
	dialFrom(t, "127.0.0.1", port)
	if h.sawCheck() {
		t.Fatal("a connection from 127.0.0.1 counted as squid's check")
	}
	dialFrom(t, audit.SelfAddr, port)
	if !h.sawCheck() {
		t.Fatal("squid's check (from audit.SelfAddr) was not seen")
	}
}

// TestHoldSharesThePort: squid (SO_REUSEPORT, worker-queues) can listen on
// the held port; a listener without it cannot (the control: the port is
// really taken). Once released, the hold answers nothing more.
func TestHoldSharesThePort(t *testing.T) {
	h, port, err := holdPort()
	if err != nil {
		t.Fatal(err)
	}
	if ln, err := listenShared(port, false); !errors.Is(err, syscall.EADDRINUSE) {
		if ln != nil {
			ln.Close()
		}
		t.Fatalf("control: a listener without SO_REUSEPORT on the held port: %v, want EADDRINUSE", err)
	}
	squid, err := listenShared(port, true)
	if err != nil {
		t.Fatalf("squid's listener beside the hold: %v", err)
	}
	h.release()
	h.release() // idempotent
	var none *portHold
	none.release()
	// Only squid's listener is left: every connection reaches it.
	squid.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	for i := 0; i < 8; i++ {
		go func() {
			if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				c.Close()
			}
		}()
		c, err := squid.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	squid.Close()
	if h.sawCheck() {
		t.Error("the hold saw a check nobody sent")
	}
	if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
		c.Close()
		t.Error("the released hold still accepts connections")
	}
}

// TestSquidListening: the gate counts as listening only where every listener
// on its ports has squid's uid, and its TLS port has one listener only.
func TestSquidListening(t *testing.T) {
	front, err := listenShared(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	tls, err := listenShared(0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer tls.Close()
	g := &Gate{Port: front.Addr().(*net.TCPAddr).Port, TLSPort: tls.Addr().(*net.TCPAddr).Port, squidUID: os.Geteuid(), uidKnown: true}
	if !g.squidListening() {
		t.Fatal("control: squid's two listeners, of its uid, are not seen")
	}
	g.squidUID = os.Geteuid() + 1
	if g.squidListening() {
		t.Error("listeners of another uid taken for squid's")
	}
	g.squidUID = os.Geteuid()
	second, err := listenShared(g.TLSPort, true)
	if err != nil {
		t.Fatal(err)
	}
	if g.squidListening() || !g.squidJoinedHold() || g.tlsPortShared() == nil {
		t.Error("a second listener on the TLS port is not seen")
	}
	second.Close()
	if g.tlsPortShared() != nil {
		t.Error("one listener on the TLS port taken for two")
	}
}

// TestNotReadySaysWhy: a gate that never became ready names the unmet
// condition and what listens on its ports.
func TestNotReadySaysWhy(t *testing.T) {
	h, tlsPort, err := holdPort()
	if err != nil {
		t.Fatal(err)
	}
	defer h.release()
	g := &Gate{Port: 1, TLSPort: tlsPort, Dir: t.TempDir(), hold: h, squidUID: os.Geteuid(), uidKnown: true}
	got := g.notReady()
	for _, want := range []string{"check of its TLS port was not seen", "aisb still holds the TLS port",
		fmt.Sprintf("on :%d [%d]", tlsPort, os.Geteuid()), "on 127.0.0.1:1 []"} {
		if !strings.Contains(got, want) {
			t.Errorf("notReady() = %q, lacks %q", got, want)
		}
	}
	h.release()
	if got := g.notReady(); strings.Contains(got, "still holds") {
		t.Errorf("after the release: %q", got)
	}
}
