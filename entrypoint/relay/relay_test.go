package relay

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/entrypoint/tunnel"
)

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func parse(t *testing.T, b []byte) dnsmessage.Message {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpack reply: %v", err)
	}
	return m
}

func TestResolver(t *testing.T) {
	r := &Resolver{Map: NewMap(contract.MappedRange)}
	a := parse(t, r.Answer(query(t, "Tp.Test.", dnsmessage.TypeA)))
	if a.Header.ID != 7 || a.RCode != dnsmessage.RCodeSuccess || len(a.Answers) != 1 {
		t.Fatalf("A: %+v", a)
	}
	got := netip.AddrFrom4(a.Answers[0].Body.(*dnsmessage.AResource).A)
	if !contract.MappedRange.Contains(got) || a.Answers[0].Header.TTL != TTL {
		t.Errorf("A = %s ttl %d, want an address of %s, ttl %d", got, a.Answers[0].Header.TTL, contract.MappedRange, TTL)
	}
	if n, ok := r.Map.Name(got); !ok || n != "tp.test" {
		t.Errorf("map back %s = %q %v, want tp.test", got, n, ok)
	}
	// The same name keeps its address; another name gets another.
	again := parse(t, r.Answer(query(t, "tp.test.", dnsmessage.TypeA)))
	if netip.AddrFrom4(again.Answers[0].Body.(*dnsmessage.AResource).A) != got {
		t.Error("the same name got another address")
	}
	other := parse(t, r.Answer(query(t, "other.test.", dnsmessage.TypeA)))
	if netip.AddrFrom4(other.Answers[0].Body.(*dnsmessage.AResource).A) == got {
		t.Error("two names share an address")
	}
	for _, typ := range []dnsmessage.Type{dnsmessage.TypeAAAA, dnsmessage.TypeSRV, dnsmessage.TypeTXT, dnsmessage.TypeMX, dnsmessage.TypeHTTPS, dnsmessage.TypeCNAME} {
		m := parse(t, r.Answer(query(t, "tp.test.", typ)))
		if m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 0 {
			t.Errorf("%v: rcode %v, %d answers; want NOERROR, none", typ, m.RCode, len(m.Answers))
		}
	}
	b := got.As4()
	ptr := parse(t, r.Answer(query(t, netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}).String()+".in-addr.arpa.", dnsmessage.TypePTR)))
	if len(ptr.Answers) != 1 || ptr.Answers[0].Body.(*dnsmessage.PTRResource).PTR.String() != "tp.test." {
		t.Errorf("PTR: %+v", ptr)
	}
	if m := parse(t, r.Answer(query(t, "10.100.51.198.in-addr.arpa.", dnsmessage.TypePTR))); m.RCode != dnsmessage.RCodeNameError {
		t.Errorf("PTR of an unmapped address: %v, want NXDOMAIN", m.RCode)
	}
	if m := parse(t, r.Answer(query(t, "a\\032b.test.", dnsmessage.TypeA))); m.RCode != dnsmessage.RCodeNameError {
		t.Errorf("malformed name: %v, want NXDOMAIN", m.RCode)
	}
	if r.Answer([]byte{1, 2, 3}) != nil {
		t.Error("a reply to three bytes")
	}
}

func TestMapNeverReuses(t *testing.T) {
	m := NewMap(netip.MustParsePrefix("198.18.0.0/30"))
	a, _ := m.Address("a.test")
	b, _ := m.Address("b.test")
	if a != netip.MustParseAddr("198.18.0.1") || b != netip.MustParseAddr("198.18.0.2") {
		t.Errorf("got %s %s", a, b)
	}
	if _, err := m.Address("c.test"); !errors.Is(err, ErrExhausted) {
		t.Errorf("third name in a /30: %v, want ErrExhausted", err)
	}
}

// fakeGate records the request head it got and answers with reply.
func fakeGate(t *testing.T, reply string) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			var head strings.Builder
			for {
				l, err := br.ReadString('\n')
				head.WriteString(l)
				if err != nil || l == "\r\n" {
					break
				}
			}
			got <- head.String()
			io.WriteString(c, reply)
			c.Close()
		}
	}()
	return ln.Addr().String(), got
}

func startRelay(t *testing.T, gate string, dst netip.AddrPort) (*Relay, string) {
	t.Helper()
	r := &Relay{Map: NewMap(contract.MappedRange), Gate: tunnel.Gate{Addr: gate, Auth: "Basic dG9rZW4="},
		Dst: func(*net.TCPConn) (netip.AddrPort, error) { return dst, nil }}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go r.Serve(ln)
	return r, ln.Addr().String()
}

func TestRelayConnectsByName(t *testing.T) {
	gate, heads := fakeGate(t, "HTTP/1.1 200 Connection established\r\n\r\nhello")
	m := NewMap(contract.MappedRange)
	a, _ := m.Address("tp.test")
	r, addr := startRelay(t, gate, netip.AddrPortFrom(a, 443))
	r.Map = m
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := io.ReadAll(c)
	head := <-heads
	if !strings.HasPrefix(head, "CONNECT tp.test:443 HTTP/1.1\r\n") || !strings.Contains(head, "Proxy-Authorization: Basic dG9rZW4=\r\n") {
		t.Errorf("gate got %q", head)
	}
	if string(b) != "hello" {
		t.Errorf("program got %q", b)
	}
}

func TestRelayPlainHTTP(t *testing.T) {
	gate, heads := fakeGate(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	m := NewMap(contract.MappedRange)
	a, _ := m.Address("tp.test")
	r, addr := startRelay(t, gate, netip.AddrPortFrom(a, 80))
	r.Map = m
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /x?y=1 HTTP/1.1\r\nHost: other.test\r\nProxy-Authorization: Basic Zm9yZ2Vk\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	head := <-heads
	if !strings.HasPrefix(head, "GET http://tp.test/x?y=1 HTTP/1.1\r\n") || !strings.Contains(head, "Host: tp.test\r\n") ||
		strings.Count(head, "Proxy-Authorization") != 1 || !strings.Contains(head, "Proxy-Authorization: Basic dG9rZW4=\r\n") {
		t.Errorf("gate got %q", head)
	}
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Errorf("program got %d %q", resp.StatusCode, body)
	}
}

// resetOrRefused waits for c to end and reports whether it ended by a reset.
func endedByReset(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, syscall.ECONNRESET)
}

func TestRelayRefusesAtOnce(t *testing.T) {
	gate, _ := fakeGate(t, "HTTP/1.1 403 Forbidden\r\n\r\n")
	m := NewMap(contract.MappedRange)
	a, _ := m.Address("unlisted.test")
	for _, dst := range []netip.AddrPort{
		netip.MustParseAddrPort("198.51.100.10:443"), // an IP literal: never mapped
		netip.AddrPortFrom(a, 443),                   // the gate refuses
	} {
		r, addr := startRelay(t, gate, dst)
		r.Map = m
		c, err := net.Dial("tcp", addr)
		if errors.Is(err, syscall.ECONNRESET) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !endedByReset(c) {
			t.Errorf("%s: not ended by a reset", dst)
		}
		c.Close()
	}
}
