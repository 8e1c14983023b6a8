package live

import (
	"bufio"
	"encoding/json"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/allowlist"
)

// prompt is one open question; every request for the host waits on it.
type prompt struct {
	id       int
	host     string
	deadline time.Time
	done     chan struct{}
	answer   string
}

// watcher is one aisb watch connected to the control socket. Its messages
// go out in order through one queue; a watcher that cannot keep up is dropped.
type watcher struct {
	c    net.Conn
	peer peer
	out  chan any // Reply first, then Messages
	once sync.Once
}

func newWatcher(c net.Conn, p peer) *watcher {
	w := &watcher{c: c, peer: p, out: make(chan any, 64)}
	go func() {
		for m := range w.out {
			w.c.SetWriteDeadline(time.Now().Add(2 * time.Second))
			if writeJSON(w.c, m) != nil {
				w.c.Close()
			}
		}
	}()
	return w
}

// send queues m; it never blocks the caller (who may hold the server's lock).
func (w *watcher) send(m any) {
	select {
	case w.out <- m:
	default:
		w.c.Close()
	}
}

func (w *watcher) stop() { w.once.Do(func() { close(w.out) }) }

// admit decides a request for name, which the gate's list does not hold:
// allowed live → yes; otherwise, in ask mode with a watcher, the watcher's
// answer within the timeout; otherwise no, at once.
func (s *Server) admit(name string) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	h, err := allowlist.ParseHost(name)
	if err != nil || h.Domain {
		s.mu.Unlock()
		return false
	}
	if allowlist.Covered(s.live, h) {
		s.mu.Unlock()
		return true
	}
	// Only names are asked about; the gate admits addresses only when listed.
	if !s.o.Ask || h.IsAddr() || h.IsNet() {
		s.mu.Unlock()
		return false
	}
	p := s.pending[name]
	if p == nil {
		refuse := ""
		switch {
		case len(s.watchers) == 0:
			refuse = AnswerNoWatcher
		case len(s.pending) >= maxPending:
			refuse = AnswerTooMany
		}
		if refuse != "" {
			// Refused either way: a failed record changes nothing.
			s.recordLocked(audit.Event{Event: audit.EventAsk, Action: refuse, Host: name})
			s.mu.Unlock()
			return false
		}
		s.nextID++
		p = &prompt{id: s.nextID, host: name, deadline: time.Now().Add(s.o.AskTimeout), done: make(chan struct{})}
		s.pending[name] = p
		for w := range s.watchers {
			w.send(Message{Type: MsgPrompt, Prompt: p.id, Host: name, Deadline: p.deadline})
		}
	}
	s.mu.Unlock()

	t := time.NewTimer(time.Until(p.deadline))
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		s.resolve(p, AnswerTimeout, nil)
	case <-s.closing:
		s.resolve(p, AnswerTimeout, nil)
	}
	<-p.done
	return admits(p.answer)
}

// resolve ends a prompt once; later answers to it change nothing.
func (s *Server) resolve(p *prompt, answer string, by *peer) bool {
	s.mu.Lock()
	if s.pending[p.host] != p {
		s.mu.Unlock()
		return false
	}
	delete(s.pending, p.host)
	e := audit.Event{Event: audit.EventAsk, Action: answer, Host: p.host}
	if by != nil {
		e.By = &audit.Who{UID: by.uid, PID: by.pid, Via: "aisb watch"}
	}
	if err := s.recordLocked(e); err != nil && admits(answer) {
		// An admission the audit cannot show does not happen.
		answer = AnswerUnrecorded
	}
	p.answer = answer
	if answer == AnswerSession {
		// Under the same lock: a request for the name arriving now is
		// admitted, not asked about again.
		if h, err := allowlist.ParseHost(p.host); err == nil {
			s.changeLocked(OpAllow, h, *by, "aisb watch")
		}
	}
	for w := range s.watchers {
		w.send(Message{Type: MsgResolved, Prompt: p.id, Host: p.host, Answer: answer})
	}
	s.mu.Unlock()
	close(p.done)
	return true
}

func admits(answer string) bool { return answer == AnswerOnce || answer == AnswerSession }

// watch serves one aisb watch: the open questions now and as they come, and
// its answers. It returns when the watcher leaves or the session ends.
func (s *Server) watch(c net.Conn, r *bufio.Reader, p peer) {
	// Registered before the reply goes out (through the same queue, so no
	// message overtakes it): once aisb watch says it watches, it is asked.
	w := newWatcher(c, p)
	defer w.stop()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.watchers[w] = true
	w.send(Reply{Allowlist: s.allowlistLocked()})
	open := make([]*prompt, 0, len(s.pending))
	for _, q := range s.pending {
		open = append(open, q)
	}
	slices.SortFunc(open, func(a, b *prompt) int { return a.id - b.id })
	for _, q := range open {
		w.send(Message{Type: MsgPrompt, Prompt: q.id, Host: q.host, Deadline: q.deadline})
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
	}()
	for {
		line, err := readLine(r)
		if err != nil {
			return
		}
		var req Request
		if json.Unmarshal(line, &req) != nil || req.Op != OpAnswer {
			continue
		}
		switch req.Answer {
		case AnswerOnce, AnswerSession, AnswerDeny:
		default:
			continue
		}
		s.mu.Lock()
		var q *prompt
		for _, x := range s.pending {
			if x.id == req.Prompt {
				q = x
			}
		}
		s.mu.Unlock()
		// An answer is for the question whose number it carries: one that
		// has ended (answered, timed out) is not passed on to another, and
		// the watcher is told its answer was not applied.
		if q == nil || !s.resolve(q, req.Answer, &p) {
			w.send(Message{Type: MsgNotOpen, Prompt: req.Prompt, Answer: req.Answer})
		}
	}
}
