package main

// The bridge: on an engine that is not local, aisb's live server is on
// another host, so nothing in the gate can dial it. aisb runs the bridge
// in the gate container through the API (an attached exec) instead; it
// listens on the helper's socket there and relays each question as a line
// on its stdout, which is aisb's end of the exec, and takes the answer
// from its stdin:
//
//	bridge → aisb: "READY" once listening, then "Q ID NAME" per question
//	aisb → bridge: "ID OK" or "ID ERR"
//
// Fail closed: a question is answered OK only for an "ID OK" line naming
// it while it is open; a malformed line or an answer for no open question
// is ignored (the question stays refused until answered or given up), and
// an oversized line, the end of stdin (the exec gone) or a failed write
// ends the bridge: every open question is refused and nothing listens any
// more, so squid's helper refuses every later one. The socket is in a
// directory of squid's user alone in the gate container, which the agent
// cannot reach: only squid's helper asks here. Nothing on the socket can
// answer a question: what a client writes is a name to ask about.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	bridgeFlag = "--bridge"
	// bridgeReady is the bridge's first line, once it listens.
	bridgeReady = "READY"
	// maxAnswerLine bounds a line from aisb ("ID OK" is at most some 25
	// bytes): a longer one ends the bridge.
	maxAnswerLine = 64
	// maxOpen bounds the questions open at once; more are refused at once.
	maxOpen = 256
)

// validName is what the bridge relays: a host as squid's %DST gives it, at
// most 300 bytes of printable ASCII without spaces (aisb parses it again).
func validName(name string) bool {
	if name == "" || name == "-" || len(name) > 300 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] > '~' {
			return false
		}
	}
	return true
}

// bridgeState is the bridge's open questions.
type bridgeState struct {
	mu     sync.Mutex
	out    io.Writer
	next   uint64
	open   map[uint64]chan bool
	closed bool
	done   chan struct{}
}

// bridge listens on sock and relays questions on out, answers from in,
// until in ends; 1 when it could not start or ended on a bad line.
func bridge(sock string, in io.Reader, out io.Writer) int {
	if fi, err := os.Lstat(sock); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			fmt.Fprintf(os.Stderr, "aisb-gatehelper: bridge: %s is not a socket\n", sock)
			return 1
		}
		os.Remove(sock)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintf(os.Stderr, "aisb-gatehelper: bridge: %v\n", err)
		return 1
	}
	defer ln.Close()
	if err := os.Chmod(sock, 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "aisb-gatehelper: bridge: %v\n", err)
		return 1
	}
	b := &bridgeState{out: out, open: map[uint64]chan bool{}, done: make(chan struct{})}
	if err := b.write(bridgeReady + "\n"); err != nil {
		return 1
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.serve(c)
		}
	}()
	code := b.answers(bufio.NewReaderSize(in, maxAnswerLine))
	b.stop()
	return code
}

// write sends one line to aisb; a failure ends the bridge.
func (b *bridgeState) write(line string) error {
	_, err := io.WriteString(b.out, line)
	return err
}

// answers reads aisb's answers until in ends (0) or a line is too long (1).
func (b *bridgeState) answers(r *bufio.Reader) int {
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			fmt.Fprintln(os.Stderr, "aisb-gatehelper: bridge: a line from aisb is too long: refusing everything")
			return 1
		}
		if err != nil {
			return 0
		}
		f := strings.Fields(string(line))
		if len(f) != 2 || (f[1] != "OK" && f[1] != "ERR") {
			continue
		}
		id, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		b.mu.Lock()
		ch := b.open[id]
		delete(b.open, id)
		b.mu.Unlock()
		if ch != nil {
			ch <- f[1] == "OK"
		}
	}
}

// stop refuses every open question and every later one.
func (b *bridgeState) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.done)
	}
}

// serve relays one question of squid's helper: "NAME\n" → "OK\n" or "ERR\n".
func (b *bridgeState) serve(c net.Conn) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReaderSize(c, 512).ReadSlice('\n')
	if err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	answer := "ERR\n"
	if b.ask(strings.TrimSuffix(string(line), "\n"), c) {
		answer = "OK\n"
	}
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte(answer))
}

// ask relays name and waits for its answer, the bridge's end, maxWait, or
// the helper's hang-up (what it sends after its question).
func (b *bridgeState) ask(name string, c net.Conn) bool {
	if !validName(name) {
		return false
	}
	ch := make(chan bool, 1)
	b.mu.Lock()
	if b.closed || len(b.open) >= maxOpen {
		b.mu.Unlock()
		return false
	}
	b.next++
	id := b.next
	b.open[id] = ch
	err := b.write(fmt.Sprintf("Q %d %s\n", id, name))
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.open, id)
		b.mu.Unlock()
	}()
	if err != nil {
		b.stop()
		return false
	}
	hungUp := make(chan struct{})
	go func() {
		var one [1]byte
		c.Read(one[:]) // the helper writes nothing more: any return is its end
		close(hungUp)
	}()
	t := time.NewTimer(maxWait)
	defer t.Stop()
	select {
	case ok := <-ch:
		return ok
	case <-b.done:
	case <-hungUp:
	case <-t.C:
	}
	return false
}
