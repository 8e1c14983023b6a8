package tunnel

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestTarget(t *testing.T) {
	for _, ok := range [][2]string{{"git.test", "22"}, {"198.51.100.22", "22"}, {"::1", "22"}, {"a_b.example", "2222"}} {
		if _, err := Target(ok[0], ok[1]); err != nil {
			t.Errorf("Target(%q, %q): %v", ok[0], ok[1], err)
		}
	}
	for _, bad := range [][2]string{
		{"git.test\r\nHost: x", "22"}, {"git.test 22", "22"}, {"", "22"}, {"git.test", "0"},
		{"git.test", "65536"}, {"git.test", "022"}, {"git.test", "ssh"}, {"gït.test", "22"}, {"a/b", "22"},
	} {
		if _, err := Target(bad[0], bad[1]); !errors.Is(err, ErrTarget) {
			t.Errorf("Target(%q, %q) = %v, want ErrTarget", bad[0], bad[1], err)
		}
	}
}

func TestGateFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if g, err := GateFromEnv(env(map[string]string{"HTTPS_PROXY": "http://100.64.0.1:4242"})); err != nil || g != (Gate{Addr: "100.64.0.1:4242"}) {
		t.Errorf("got %q, %v", g, err)
	}
	// The token in the proxy URL becomes the CONNECT's Proxy-Authorization.
	g, err := GateFromEnv(env(map[string]string{"HTTPS_PROXY": "http://aisb:s3cret@100.64.0.1:4242"}))
	if want := (Gate{Addr: "100.64.0.1:4242", Auth: "Basic YWlzYjpzM2NyZXQ="}); err != nil || g != want {
		t.Errorf("got %+v, %v; want %+v", g, err, want)
	}
	if g, err := GateFromEnv(env(nil)); err != nil || g != (Gate{}) {
		t.Errorf("no proxy: got %q, %v", g, err)
	}
	for _, bad := range []string{"socks5://100.64.0.1:1", "http://100.64.0.1", "::", "socks5://aisb:s3cret@x:1"} {
		_, err := GateFromEnv(env(map[string]string{"https_proxy": bad}))
		if err == nil {
			t.Errorf("accepted proxy %q", bad)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error shows the token: %v", err)
		}
	}
}

// fakeGate answers one CONNECT with reply, then echoes what it gets after a
// greeting sent in the same write as the reply.
func fakeGate(t *testing.T, reply string) (addr string, asked chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	asked = make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		var req []string // the request line, then the header lines
		for {
			l, err := br.ReadString('\n')
			if err != nil || l == "\r\n" {
				break
			}
			req = append(req, strings.TrimSpace(l))
		}
		asked <- strings.Join(req, "\n")
		if !strings.Contains(reply, " 200 ") {
			io.WriteString(c, reply)
			return
		}
		io.WriteString(c, reply+"SSH-2.0-fake\r\n")
		io.Copy(c, br) // echo until the client closes its side
	}()
	return ln.Addr().String(), asked
}

func TestDialThroughGate(t *testing.T) {
	addr, asked := fakeGate(t, "HTTP/1.1 200 Connection established\r\n\r\n")
	c, err := Dial(Gate{Addr: addr}, "git.test:22", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-asked; got != "CONNECT git.test:22 HTTP/1.1\nHost: git.test:22" {
		t.Errorf("request %q", got)
	}
	var out bytes.Buffer
	if err := Pipe(c, strings.NewReader("client bytes\n"), &out); err != nil {
		t.Fatal(err)
	}
	// The greeting sent with the reply is not lost; the echo proves the
	// client's half-close reached the other end and the pipe then ended.
	if out.String() != "SSH-2.0-fake\r\nclient bytes\n" {
		t.Errorf("tunnel carried %q", out.String())
	}
}

// TestDialSendsToken: the CONNECT carries the sandbox's proof for the
// gate, which refuses any other (the gate's tests).
func TestDialSendsToken(t *testing.T) {
	addr, asked := fakeGate(t, "HTTP/1.1 403 Forbidden\r\n\r\n")
	Dial(Gate{Addr: addr, Auth: "Basic YWlzYjpzM2NyZXQ="}, "git.test:22", 5*time.Second)
	if got := <-asked; got != "CONNECT git.test:22 HTTP/1.1\nHost: git.test:22\nProxy-Authorization: Basic YWlzYjpzM2NyZXQ=" {
		t.Errorf("request %q", got)
	}
}

func TestDialRefused(t *testing.T) {
	addr, _ := fakeGate(t, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
	_, err := Dial(Gate{Addr: addr}, "other.test:22", 5*time.Second)
	var r *RefusedError
	if !errors.As(err, &r) || !errors.Is(err, ErrRefused) || r.Status != "HTTP/1.1 403 Forbidden" {
		t.Fatalf("got %v", err)
	}
}

func TestMainRefusedSaysHowToAllow(t *testing.T) {
	addr, _ := fakeGate(t, "HTTP/1.1 403 Forbidden\r\n\r\n")
	t.Setenv("HTTPS_PROXY", "http://"+addr)
	t.Setenv("https_proxy", "")
	var stderr bytes.Buffer
	if code := Main([]string{"other.test", "22"}, strings.NewReader(""), io.Discard, &stderr); code != 1 {
		t.Errorf("exit %d", code)
	}
	if !strings.Contains(stderr.String(), "--allow-ssh other.test") {
		t.Errorf("stderr %q", stderr.String())
	}
	if code := Main([]string{"x"}, nil, io.Discard, io.Discard); code != 64 {
		t.Errorf("usage: exit %d", code)
	}
}
