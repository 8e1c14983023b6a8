package gate

// A remote gate's question path (issue #29): its squid asks names its list
// does not hold of aisb-gatehelper, which dials the helper's socket; on an
// engine that is not local that socket cannot be this host's (nothing is
// mounted there), so aisb runs the helper's bridge mode in the gate
// container through the API (an attached exec) and answers the questions
// it relays on the exec's stdio, asking the session's live server here
// (Remote.Ask). cmd/aisb-gatehelper/bridge.go is the other end.
//
// Fail closed on this side too: a line from the bridge that is not a
// question is ignored, an oversized one ends the relay (the bridge then
// refuses everything), and only Ask's yes is ever written as OK. What the
// bridge writes is a name to ask about, never an answer: nothing it sends
// can admit anything by itself. A bridge that ends while the gate runs is
// said on stderr; every later question is then refused.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aisb-dev/aisb/internal/engine"
)

// The helper's socket in a remote gate: in a directory of squid's user
// alone (copied in with the probe's program), where squid's helper dials
// and the bridge listens.
const (
	bridgeDir    = "/aisb-ask"
	bridgeSocket = bridgeDir + "/helper.sock"
)

// The bridge's protocol (cmd/aisb-gatehelper/bridge.go).
const (
	bridgeReady = "READY"
	// maxQuestionLine bounds a line from the bridge ("Q ID NAME", a name
	// at most 300 bytes): a longer one ends the relay.
	maxQuestionLine = 400
	// maxAsking bounds the questions asked at once; more are refused at once.
	maxAsking = 256
	// bridgeWait bounds how long the gate waits for its bridge to listen.
	bridgeWait = 20 * time.Second
)

// ErrBridge wraps a question path that could not start.
var ErrBridge = errors.New("the gate's question path through the API failed")

// relay is aisb's end of a remote gate's bridge.
type relay struct {
	ask  func(string) bool
	logf func(string, ...any)
	in   *io.PipeWriter // the bridge's stdin: closed to end it
	wmu  sync.Mutex     // one answer line at a time
	sem  chan struct{}

	readyOnce sync.Once
	readyCh   chan struct{} // closed once the bridge's first line came, or its end
	readyErr  error         // why it is not ready; set before readyCh closes
	done      chan struct{}
	stopped   chan struct{} // closed by stop: the end is aisb's
	once      sync.Once
}

// setReady records the bridge's word (nil) or why it will not come; only
// the first call counts.
func (r *relay) setReady(err error) {
	r.readyOnce.Do(func() {
		r.readyErr = err
		close(r.readyCh)
	})
}

// startRelay runs the bridge in the running gate name and relays its
// questions to ask until stop, the gate's end or the bridge's.
func startRelay(c engine.Engine, name string, ask func(string) bool, logf func(string, ...any)) *relay {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &relay{ask: ask, logf: logf, in: inW, sem: make(chan struct{}, maxAsking),
		readyCh: make(chan struct{}), done: make(chan struct{}), stopped: make(chan struct{})}
	var stderr strings.Builder
	exited := make(chan error, 1)
	go func() {
		code, err := c.ContainerExec(context.Background(), name, []string{probeProgram, "--bridge", bridgeSocket}, inR, outW, &limited{w: &stderr, n: 4096})
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr.String()))
		}
		inR.Close()
		outW.CloseWithError(io.EOF)
		exited <- err
	}()
	go func() {
		defer close(r.done)
		r.read(outR)
		outR.Close()
		inW.Close() // the bridge refuses everything once its stdin ends
		err := <-exited
		r.setReady(fmt.Errorf("%w: the bridge ended before it listened: %v", ErrBridge, errOr(err, "no word")))
		select {
		case <-r.stopped:
		default:
			if r.logf != nil && r.readyErr == nil {
				r.logf("WARNING: the gate's question path through the API ended (%v): names the gate does not list are refused from now on (aisb allow, ask mode)", errOr(err, "the bridge closed its output"))
			}
		}
	}()
	return r
}

func errOr(err error, s string) any {
	if err != nil {
		return err
	}
	return s
}

// read relays the bridge's questions until its output ends or a line is
// too long.
func (r *relay) read(out io.Reader) {
	br := bufio.NewReaderSize(out, maxQuestionLine)
	first := true
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if r.logf != nil {
				r.logf("the gate's question path: a line over %d bytes from the bridge: it is ended, and unlisted names are refused", maxQuestionLine)
			}
			return
		}
		if err != nil {
			return
		}
		text := strings.TrimSuffix(string(line), "\n")
		if first {
			first = false
			if text != bridgeReady {
				r.setReady(fmt.Errorf("%w: the bridge began with %q", ErrBridge, truncate([]byte(text), 100)))
				return
			}
			r.setReady(nil)
			continue
		}
		id, name, ok := parseQuestion(text)
		if !ok {
			continue
		}
		select {
		case r.sem <- struct{}{}:
		default:
			r.answer(id, false)
			continue
		}
		go func() {
			defer func() { <-r.sem }()
			r.answer(id, r.ask(name))
		}()
	}
}

// parseQuestion reads "Q ID NAME": ID decimal, NAME printable ASCII
// without spaces, at most 300 bytes.
func parseQuestion(line string) (uint64, string, bool) {
	f := strings.Split(line, " ")
	if len(f) != 3 || f[0] != "Q" || f[2] == "" || len(f[2]) > 300 {
		return 0, "", false
	}
	id, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || strconv.FormatUint(id, 10) != f[1] {
		return 0, "", false
	}
	for i := 0; i < len(f[2]); i++ {
		if f[2][i] <= ' ' || f[2][i] > '~' {
			return 0, "", false
		}
	}
	return id, f[2], true
}

// answer writes one answer; OK only when ask said yes.
func (r *relay) answer(id uint64, ok bool) {
	word := "ERR"
	if ok {
		word = "OK"
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	fmt.Fprintf(r.in, "%d %s\n", id, word)
}

// waitReady waits for the bridge to listen.
func (r *relay) waitReady(within time.Duration) error {
	select {
	case <-r.readyCh:
		return r.readyErr
	case <-time.After(within):
		return fmt.Errorf("%w: the bridge did not listen within %s", ErrBridge, within)
	}
}

// stop ends the relay (the gate is going): the bridge's stdin closes.
// A nil relay (a gate without one) has nothing to stop.
func (r *relay) stop() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		close(r.stopped)
		r.in.Close()
	})
}

// limited writes at most n bytes to w.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
