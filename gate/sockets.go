package gate

import (
	"os"
	"strconv"
	"strings"
)

// Listening reports whether sockets of this network namespace listen on
// 127.0.0.1 on every one of ports (state 0A in /proc/net/tcp, read once).
func Listening(ports ...int) bool {
	l, err := listeners()
	if err != nil {
		return false
	}
	for _, p := range ports {
		if len(l[p]) == 0 {
			return false
		}
	}
	return true
}

// listeners reads the socket table once: for each port of 127.0.0.1, the
// uids (on the host) of the sockets listening there.
func listeners() (map[int][]int, error) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	out := map[int][]int{}
	for _, l := range strings.Split(string(b), "\n") {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
		f := strings.Fields(l)
		if len(f) < 8 || f[3] != "0A" {
			continue
		}
		addr, port, ok := strings.Cut(f[1], ":")
		if !ok || addr != "0100007F" {
			continue
		}
		p, err1 := strconv.ParseUint(port, 16, 16)
		uid, err2 := strconv.Atoi(f[7])
		if err1 == nil && err2 == nil {
			out[int(p)] = append(out[int(p)], uid)
		}
	}
	return out, nil
}

// squidListening reports whether squid listens on both ports and nothing
// else does: every listener there has squid's uid where it is known (a
// socket of another user on a gate's port is not the gate), and the TLS
// port has one listener only (the hold is gone).
func (g *Gate) squidListening() bool {
	l, err := listeners()
	if err != nil {
		return false
	}
	for _, p := range []int{g.Port, g.TLSPort} {
		if len(l[p]) == 0 {
			return false
		}
		for _, uid := range l[p] {
			if g.uidKnown && uid != g.squidUID {
				return false
			}
		}
	}
	return len(l[g.TLSPort]) == 1
}

// squidJoinedHold reports whether a second socket of squid's uid listens
// beside the hold on the TLS port: squid's own (while the hold is there only
// a socket of the hold's uid, which is squid's, can join it).
func (g *Gate) squidJoinedHold() bool {
	l, err := listeners()
	if err != nil {
		return false
	}
	n := 0
	for _, uid := range l[g.TLSPort] {
		if uid == g.squidUID {
			n++
		}
	}
	return n >= 2
}
