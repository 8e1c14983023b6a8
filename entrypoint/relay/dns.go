package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// TTL is what every answer says: short, so that a client asks again rather
// than keeps an address past the session's restart.
const TTL = 5

// ErrExhausted: every address of the mapped range is given out.
var ErrExhausted = errors.New("every address of the mapped range is in use")

// Map gives each name asked for an address of its range, the same one for
// the same name, and never gives an address out twice in a session: an
// address maps back to exactly one name.
type Map struct {
	mu     sync.Mutex
	prefix netip.Prefix
	next   netip.Addr
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
}

// NewMap maps names into prefix (an IPv4 network), from its second address on.
func NewMap(prefix netip.Prefix) *Map {
	return &Map{prefix: prefix.Masked(), next: prefix.Masked().Addr().Next(),
		byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{}}
}

// Address returns name's address, giving it one when it has none yet.
func (m *Map) Address(name string) (netip.Addr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.byName[name]; ok {
		return a, nil
	}
	a := m.next
	if !m.prefix.Contains(a) || !m.prefix.Contains(a.Next()) {
		// The last address (the range's broadcast) is never given out.
		return netip.Addr{}, ErrExhausted
	}
	m.next = a.Next()
	m.byName[name], m.byAddr[a] = a, name
	return a, nil
}

// Name returns the name a was given to.
func (m *Map) Name(a netip.Addr) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.byAddr[a.Unmap()]
	return n, ok
}

// Resolver answers the agent's queries from its Map alone; it never sends a
// query anywhere. What each type gets:
//
//   - A (and ANY): the name's mapped address, TTL 5;
//   - PTR of a mapped address: its name; of any other address: NXDOMAIN;
//   - every other type (AAAA, SRV, TXT, MX, HTTPS, SVCB, CNAME, ...):
//     NOERROR with no records, so that clients use the A record and
//     nothing about the name leaves;
//   - a name that is not a host name (a label outside [a-z0-9_-], empty,
//     over 63 bytes, or over 253 in all): NXDOMAIN;
//   - anything but one question of class IN in a standard query: FORMERR,
//     NOTIMP or REFUSED.
type Resolver struct {
	Map *Map
}

// ValidName lower-cases name, drops one trailing dot, and reports whether
// what is left is a host name the resolver maps.
func ValidName(name string) (string, bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" || len(name) > 253 {
		return "", false
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" || len(l) > 63 {
			return "", false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return "", false
			}
		}
	}
	return name, true
}

// Answer builds the reply to one query message; nil when the query cannot
// be parsed far enough to reply (no header).
func (r *Resolver) Answer(query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	reply := func(rc dnsmessage.RCode, q *dnsmessage.Question, answer func(*dnsmessage.Builder) error) []byte {
		rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, Authoritative: true,
			RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rc}
		b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
		b.EnableCompression()
		if q != nil {
			if b.StartQuestions() != nil || b.Question(*q) != nil {
				return nil
			}
		}
		if answer != nil {
			if b.StartAnswers() != nil || answer(&b) != nil {
				return nil
			}
		}
		out, err := b.Finish()
		if err != nil {
			return nil
		}
		return out
	}
	if h.Response {
		return nil
	}
	if h.OpCode != 0 {
		return reply(dnsmessage.RCodeNotImplemented, nil, nil)
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return reply(dnsmessage.RCodeFormatError, nil, nil)
	}
	q := qs[0]
	if q.Class != dnsmessage.ClassINET {
		return reply(dnsmessage.RCodeRefused, &q, nil)
	}
	name, ok := ValidName(q.Name.String())
	if !ok {
		return reply(dnsmessage.RCodeNameError, &q, nil)
	}
	rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: TTL}
	switch q.Type {
	case dnsmessage.TypeA, dnsmessage.TypeALL:
		a, err := r.Map.Address(name)
		if err != nil {
			return reply(dnsmessage.RCodeServerFailure, &q, nil)
		}
		return reply(dnsmessage.RCodeSuccess, &q, func(b *dnsmessage.Builder) error {
			return b.AResource(rr, dnsmessage.AResource{A: a.As4()})
		})
	case dnsmessage.TypePTR:
		a, ok := ptrAddr(name)
		if !ok {
			return reply(dnsmessage.RCodeNameError, &q, nil)
		}
		n, ok := r.Map.Name(a)
		if !ok {
			return reply(dnsmessage.RCodeNameError, &q, nil)
		}
		target, err := dnsmessage.NewName(n + ".")
		if err != nil {
			return reply(dnsmessage.RCodeServerFailure, &q, nil)
		}
		return reply(dnsmessage.RCodeSuccess, &q, func(b *dnsmessage.Builder) error {
			return b.PTRResource(rr, dnsmessage.PTRResource{PTR: target})
		})
	default:
		return reply(dnsmessage.RCodeSuccess, &q, nil)
	}
}

// ptrAddr reads d.c.b.a.in-addr.arpa.
func ptrAddr(name string) (netip.Addr, bool) {
	rest, ok := strings.CutSuffix(name, ".in-addr.arpa")
	if !ok {
		return netip.Addr{}, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, s := range parts {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 255 || strconv.Itoa(n) != s {
			return netip.Addr{}, false
		}
		b[3-i] = byte(n)
	}
	return netip.AddrFrom4(b), true
}

// ServeUDP answers every datagram on c until c is closed.
func (r *Resolver) ServeUDP(c net.PacketConn) error {
	buf := make([]byte, 1500)
	// A *net.UDPConn (the relay's) is read without allocating an address
	// per query.
	if uc, ok := c.(*net.UDPConn); ok {
		for {
			n, from, err := uc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return fmt.Errorf("resolver: %w", err)
			}
			if out := r.Answer(buf[:n]); out != nil {
				uc.WriteToUDPAddrPort(out, from)
			}
		}
	}
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("resolver: %w", err)
		}
		if out := r.Answer(buf[:n]); out != nil {
			c.WriteTo(out, from)
		}
	}
}

// ServeTCP answers DNS over TCP (length-prefixed messages) on every
// connection ln accepts until ln is closed.
func (r *Resolver) ServeTCP(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("resolver: %w", err)
		}
		go func() {
			defer c.Close()
			for {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				var l [2]byte
				if _, err := readFull(c, l[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := readFull(c, msg); err != nil {
					return
				}
				out := r.Answer(msg)
				if out == nil {
					return
				}
				if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
					return
				}
			}
		}()
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
