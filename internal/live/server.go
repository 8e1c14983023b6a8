package live

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/netaddr"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

// DefaultAskTimeout is how long a request waits for a watcher's answer.
const DefaultAskTimeout = 30 * time.Second

// maxPending bounds the questions open at once; more are refused at once.
const maxPending = 32

// Options start a session's live server.
type Options struct {
	Session    string
	Start      []allowlist.Host // the allowlist squid.conf lists: never asked about
	Ask        bool
	AskTimeout time.Duration // 0: DefaultAskTimeout
	// HelperSocket is where the gate's helper connects (its directory is
	// mounted into a local gate); "" for a gate on an engine that is not
	// local, whose questions come through the API to Ask.
	HelperSocket  string
	ControlSocket string // aisb allow, deny and watch connect here (never mounted anywhere)
	// Record writes one event to the session's audit. A policy change it
	// cannot record does not happen; nor does an admitting answer.
	Record   func(audit.Event) error
	OnChange func(allowlist []string)
}

// Server is a running session's live allowlist.
type Server struct {
	o       Options
	helper  *net.UnixListener
	control *net.UnixListener
	wg      sync.WaitGroup
	closing chan struct{}

	mu       sync.Mutex
	live     []allowlist.Host // allowed while the session runs
	watchers map[*watcher]bool
	pending  map[string]*prompt // by host
	nextID   int
	closed   bool
}

// Start listens on both sockets. On failure nothing is left listening.
func Start(o Options) (*Server, error) {
	if o.AskTimeout <= 0 {
		o.AskTimeout = DefaultAskTimeout
	}
	s := &Server{o: o, closing: make(chan struct{}), watchers: map[*watcher]bool{}, pending: map[string]*prompt{}}
	var err error
	if o.HelperSocket != "" {
		if s.helper, err = listen(o.HelperSocket); err != nil {
			return nil, fmt.Errorf("live: %w", err)
		}
	}
	if s.control, err = listen(o.ControlSocket); err != nil {
		if s.helper != nil {
			s.helper.Close()
		}
		return nil, fmt.Errorf("live: %w", err)
	}
	if s.helper != nil {
		s.wg.Add(1)
		go s.accept(s.helper, s.serveHelper)
	}
	s.wg.Add(1)
	go s.accept(s.control, s.serveControl)
	return s, nil
}

// Close stops listening, refuses every waiting question and ends watches.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.closing)
	for w := range s.watchers {
		w.c.Close()
	}
	s.mu.Unlock()
	if s.helper != nil {
		s.helper.Close()
	}
	s.control.Close()
	s.wg.Wait()
}

func (s *Server) accept(ln *net.UnixListener, serve func(net.Conn)) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			serve(c)
		}()
	}
}

// Allowlist is the list in force: the start list, then what was allowed live.
func (s *Server) Allowlist() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allowlistLocked()
}

func (s *Server) allowlistLocked() []string {
	var out []string
	for _, h := range append(slices.Clone(s.o.Start), s.live...) {
		out = append(out, h.String())
	}
	return out
}

// serveHelper answers one question of the gate's helper: "NAME\n" → "OK\n"
// or "ERR\n". Nothing on this socket can change the allowlist.
func (s *Server) serveHelper(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := readLine(bufio.NewReaderSize(c, 512))
	if err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	answer := "ERR\n"
	if s.Ask(string(line)) {
		answer = "OK\n"
	}
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte(answer))
}

// Ask answers one question of the gate's helper about name, the gate's
// word for the host: true admits it (allowed live, or a watcher said so
// in time). It waits at most the ask timeout, and refuses once the server
// is closed. A remote gate's questions come here through the API.
func (s *Server) Ask(name string) bool {
	return s.admit(strings.TrimSuffix(strings.ToLower(name), "."))
}

// serveControl serves one client of the control socket: only the user's
// own processes are answered.
func (s *Server) serveControl(c net.Conn) {
	p, err := peerOf(c)
	if err != nil || p.uid != os.Getuid() {
		return
	}
	r := bufio.NewReaderSize(c, maxLine)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := readLine(r)
	if err != nil {
		return
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		writeJSON(c, Reply{Error: "not a control request"})
		return
	}
	c.SetReadDeadline(time.Time{})
	switch req.Op {
	case OpAllow, OpDeny:
		changed, err := s.change(req.Op, req.Host, p, "aisb "+req.Op)
		rep := Reply{Changed: changed, Allowlist: s.Allowlist()}
		if err != nil {
			rep.Error = err.Error()
		}
		writeJSON(c, rep)
	case OpWatch:
		s.watch(c, r, p)
	default:
		writeJSON(c, Reply{Error: fmt.Sprintf("unknown operation %q", printable(req.Op))})
	}
}

// ErrStartListed is a deny of a name the session's gate lists from the start:
// its squid.conf holds it, and reloading squid drops new connections.
var ErrStartListed = errors.New("listed since the session started")

// ErrNotAllowed is a deny of a name that is not allowed.
var ErrNotAllowed = errors.New("not allowed in this session")

// ErrInternal is an allow of an address or network the gate refuses
// whatever is allowed.
var ErrInternal = errors.New("internal addresses stay refused whatever is allowed")

// refusedAddr says why an address or network entry can never be admitted;
// nil for a name (whose addresses the gate checks at each request) and for
// an address it may reach.
func refusedAddr(h allowlist.Host) error {
	if !h.IsAddr() && !h.IsNet() {
		return nil
	}
	host, err := netaddr.HostAddrs()
	if err != nil {
		return fmt.Errorf("%s: read this host's addresses: %w", h, err)
	}
	if h.IsAddr() && host.Internal(h.Addr) {
		return fmt.Errorf("%s is an internal address (loopback, private, link-local, CGNAT or this host's own): %w", h, ErrInternal)
	}
	if h.IsNet() {
		if why := host.Overlap(h.Net); why != "" {
			return fmt.Errorf("%s %s: %w", h, why, ErrInternal)
		}
	}
	return nil
}

// change applies aisb allow or deny (or a watcher's "session" answer).
func (s *Server) change(op, host string, p peer, via string) (bool, error) {
	h, err := allowlist.ParseHost(host)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changeLocked(op, h, p, via)
}

func (s *Server) changeLocked(op string, h allowlist.Host, p peer, via string) (bool, error) {
	if s.closed {
		return false, errors.New("the session is ending")
	}
	covered := func(list []allowlist.Host) bool {
		return slices.ContainsFunc(list, func(x allowlist.Host) bool { return x.Covers(h) })
	}
	before := slices.Clone(s.live)
	switch op {
	case OpAllow:
		if err := refusedAddr(h); err != nil {
			return false, err
		}
		if covered(s.o.Start) || covered(s.live) {
			return false, nil
		}
		// A wider entry replaces the live entries it covers.
		s.live = slices.DeleteFunc(s.live, func(x allowlist.Host) bool { return h.Covers(x) })
		s.live = append(s.live, h)
	case OpDeny:
		n := len(s.live)
		s.live = slices.DeleteFunc(s.live, func(x allowlist.Host) bool { return h.Covers(x) })
		if len(s.live) == n {
			if covered(s.o.Start) || slices.ContainsFunc(s.o.Start, func(x allowlist.Host) bool { return h.Covers(x) }) {
				return false, fmt.Errorf("%s: %w (aisb deny withdraws what was allowed while the session runs; to drop a start entry, restart the session without it)", h, ErrStartListed)
			}
			return false, fmt.Errorf("%s: %w", h, ErrNotAllowed)
		}
	default:
		return false, fmt.Errorf("unknown change %q", op)
	}
	if err := s.recordLocked(audit.Event{Event: audit.EventPolicyChange, Action: op, Host: h.String(), By: &audit.Who{UID: p.uid, PID: p.pid, Via: via}}); err != nil {
		s.live = before
		return false, fmt.Errorf("%s %s: %w; nothing changed", op, h, err)
	}
	if s.o.OnChange != nil {
		s.o.OnChange(s.allowlistLocked())
	}
	return true, nil
}

// recordLocked writes one event to the session's audit.
func (s *Server) recordLocked(e audit.Event) error {
	if s.o.Record == nil {
		return nil
	}
	e.Time = time.Now().UTC()
	e.Session = s.o.Session
	return s.o.Record(e)
}

// printable is what came over a socket, made safe for a terminal and short.
func printable(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return termsafe.Printable(s)
}
