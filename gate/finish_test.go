package gate

import (
	"net"
	"testing"
	"time"
)

// TestClientConns: a connection counts from accept until the listener
// closes its end, also after the client closed its own.
func TestClientConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if n := ClientConns(port); n != 0 {
		t.Fatalf("before any connection: %d", n)
	}
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if n := ClientConns(port); n != 1 {
		t.Errorf("open: %d", n)
	}
	client.Close()
	time.Sleep(50 * time.Millisecond)
	if n := ClientConns(port); n != 1 {
		t.Errorf("closed by the client only: %d", n)
	}
	server.Close()
	time.Sleep(50 * time.Millisecond)
	if n := ClientConns(port); n != 0 {
		t.Errorf("closed by both: %d", n)
	}
}

// TestQuiesce: it returns once no connection is open on either port and the
// log has been quiet, not before; and gives up at its bound.
func TestQuiesce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g := &Gate{Port: ln.Addr().(*net.TCPAddr).Port, Dir: t.TempDir()}
	quiesceAfterClose(t, g, ln, "with a connection on the front")
	// A tunnel handed to the TLS port: the sandbox's connection to the
	// front is gone, the front's to the TLS port not yet; it holds Quiesce.
	tls, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tls.Close()
	g.TLSPort = tls.Addr().(*net.TCPAddr).Port
	quiesceAfterClose(t, g, tls, "with a connection on the TLS port only")
	client, _ := net.Dial("tcp", ln.Addr().String())
	defer client.Close()
	server, _ := ln.Accept()
	defer server.Close()
	start := time.Now()
	g.Quiesce(200 * time.Millisecond)
	if d := time.Since(start); d < 200*time.Millisecond || d > time.Second {
		t.Errorf("Quiesce bounded by 200 ms returned after %s", d)
	}
}

// quiesceAfterClose opens a connection to ln, closes both its ends after
// 300 ms, and checks Quiesce returned no sooner than Quiet after the close
// and well within its bound.
func quiesceAfterClose(t *testing.T, g *Gate, ln net.Listener, what string) {
	t.Helper()
	client, _ := net.Dial("tcp", ln.Addr().String())
	server, _ := ln.Accept()
	closed := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		// The time is taken before the close: Quiesce may see the
		// connection gone before this goroutine runs again.
		at := time.Now()
		client.Close()
		server.Close()
		closed <- at
	}()
	start := time.Now()
	g.Quiesce(5 * time.Second)
	end := time.Now()
	if at := <-closed; end.Before(at.Add(Quiet)) || end.Sub(start) > 2*time.Second {
		t.Errorf("%s, Quiesce returned %s after it closed (want at least %s), %s after it began", what, end.Sub(at), Quiet, end.Sub(start))
	}
}
