package gate

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/state"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

// waitReady waits until squid listens on both ports (its pid file appears
// before the listeners) and has found its TLS port up, while the container
// is still running. It reads the kernel's socket table rather than
// connecting, so that readiness leaves no line in the audit log. Until
// squid's own check of its TLS port succeeded, squid takes that port for
// down and would fail a tunnel to 443: listening alone is not ready. The
// check is seen where it lands: at aisb's hold of the port (hold.go) or in
// the access log, as a line the audit drops (isSelfCheck). The
// table and the log are read every few milliseconds (both are cheap); the
// service is asked whether squid still runs only now and then, and once
// more when it is ready, which records squid's process.
//
// The service can take long to answer: right after the pi image was built,
// while the first sandbox of it started beside the gate, asking whether
// squid runs took 20.5 s on a 2-core VM (the gate was ready within 0.6 s;
// every CI run from nothing failed TestCredentialsPiHarness so). So the
// deadline is checked right after the table, never right after a question
// to the service: a gate that became ready while the service kept aisb
// waiting is ready.
func (g *Gate) waitReady(c engine.Engine, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		// tlsPortUp lets go of the hold first: only squid's own
		// listeners are left to see.
		if g.tlsPortUp() && g.squidListening() {
			if pid, ok := g.pid(c); ok {
				if pid > 0 {
					g.squid = state.OwnerOf(pid)
				}
				return nil
			}
			return fmt.Errorf("start gate: squid exited: %s", g.squidError())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start gate: not ready within %s (%s): %s", timeout, g.notReady(), g.squidError())
		}
		if i%50 == 49 && !g.running(c) {
			return fmt.Errorf("start gate: squid exited: %s", g.squidError())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// notReady says which of waitReady's conditions is unmet, with what the
// socket table shows on the gate's ports, so that a gate that never became
// ready says why.
func (g *Gate) notReady() string {
	var why []string
	atHold, inLog := g.hold.sawCheck(), g.tlsPortChecked()
	if !atHold && !inLog {
		why = append(why, "squid's check of its TLS port was not seen")
	} else {
		why = append(why, fmt.Sprintf("squid's check seen at aisb's hold: %t, in the access log: %t", atHold, inLog))
	}
	if g.hold.held() {
		why = append(why, fmt.Sprintf("aisb still holds the TLS port (it took %d connections, squid's check %s after it was made)", g.hold.conns.Load(), g.hold.checkDelay()))
	}
	l, err := listeners()
	if err != nil {
		return strings.Join(append(why, fmt.Sprintf("socket table: %v", err)), "; ")
	}
	if g.uidKnown {
		why = append(why, fmt.Sprintf("squid's uid %d", g.squidUID))
	}
	why = append(why, fmt.Sprintf("listener uids on 127.0.0.1:%d %v, on :%d %v", g.Port, l[g.Port], g.TLSPort, l[g.TLSPort]))
	return strings.Join(why, "; ")
}

// tlsPortUp reports whether squid has found its TLS port up (its check
// reached the hold or squid's own listener) and the hold is gone. The hold
// is released only once squid's own listener has joined it, so the port is
// never free for another user's socket to take.
func (g *Gate) tlsPortUp() bool {
	if !g.hold.sawCheck() && !g.tlsPortChecked() {
		return false
	}
	if g.hold.held() {
		if !g.squidJoinedHold() {
			return false
		}
		g.hold.release()
	}
	return true
}

// tlsPortChecked reports whether the access log holds squid's check of its
// TLS port (the front hands no tunnel over before that check succeeded).
func (g *Gate) tlsPortChecked() bool {
	b, err := safefile.Read(filepath.Join(g.Dir, "access.log"), 1<<20)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if e, err := audit.ParseLine(l); errors.Is(err, audit.ErrBookkeeping) && audit.IsSelfCheck(e) {
			return true
		}
	}
	return false
}

// squidError is squid's own complaint from cache.log: its FATAL/ERROR lines,
// or the last lines.
func (g *Gate) squidError() string {
	b, err := safefile.Read(filepath.Join(g.Dir, "cache.log"), 1<<20)
	if err != nil {
		return fmt.Sprintf("cache.log: %v", err)
	}
	var bad, all []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(l, "FATAL") || strings.Contains(l, "ERROR") || strings.Contains(l, "Bungled") {
			bad = append(bad, strings.TrimSpace(l))
		}
		all = append(all, l)
	}
	if len(bad) > 0 {
		return termsafe.Printable(strings.Join(bad, "; "))
	}
	if len(all) > 3 {
		all = all[len(all)-3:]
	}
	if s := strings.Join(all, "; "); s != "" {
		return termsafe.Printable(s)
	}
	return "no message in " + filepath.Join(g.Dir, "cache.log")
}
