package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aisb-dev/aisb/internal/tail"
)

// Follow converts the access log at path into JSON audit lines on out as
// squid writes them, until ctx ends; then it converts what remains and
// returns. A missing log is waited for.
func Follow(ctx context.Context, path, session string, out io.Writer) error {
	_, err := follow(ctx, path, session, out, tail.Options{Free: true})
	return err
}

func follow(ctx context.Context, path, session string, out io.Writer, o tail.Options) (int64, error) {
	enc := json.NewEncoder(out)
	// squid can write its directory: the log is opened without following a
	// link, must be a regular file, and what is converted is freed.
	return tail.FollowLog(ctx, path, o, func(line []byte) error {
		e, ok := eventFor(string(line), session)
		if !ok {
			return nil
		}
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("write audit: %w", err)
		}
		return nil
	})
}

// eventFor drops only squid's bookkeeping lines: one the parser cannot read
// is a blocked event.
func eventFor(line, session string) (Event, bool) {
	e, err := ParseLine(line)
	switch {
	case errors.Is(err, ErrBookkeeping):
		return e, false
	case err != nil:
		return Event{Time: time.Now().UTC(), Session: session, Event: EventBlocked, Rule: RuleMalformed, Host: "-"}, true
	}
	return e, true
}

// Follower converts a gate's access log into an audit.
type Follower struct {
	cancel  context.CancelFunc
	done    chan error
	end     int64 // where the follow stopped in the access log, once done
	handoff atomic.Bool
}

// StartFollow appends session's decisions to a as squid writes them to its
// access log at accessLog, from offset from of it: where an earlier follower
// handed off (Handoff), or 0. Stop drains what is left.
func StartFollow(ctx context.Context, accessLog, session string, a *Audit, from int64, logf func(string, ...any)) *Follower {
	fctx, cancel := context.WithCancel(ctx)
	fl := &Follower{cancel: cancel, done: make(chan error, 1)}
	go func() {
		end, err := follow(fctx, accessLog, session, a, tail.Options{Free: true, From: from, Handoff: fl.handoff.Load})
		if err != nil {
			logf("audit of %s stopped: %v", session, err)
		}
		fl.end = end
		fl.done <- err
	}()
	return fl
}

// Stop converts what is left and returns the first error the follower met
// (a write that failed: the audit has a gap, and the caller must say so).
// It does not close the audit.
func (fl *Follower) Stop() error {
	fl.cancel()
	return <-fl.done
}

// Handoff is Stop for a gate that is still running: it converts the
// complete lines written so far and returns the offset in the access log
// where another follower (StartFollow) continues, a line squid is still
// writing included.
func (fl *Follower) Handoff() (int64, error) {
	fl.handoff.Store(true)
	err := fl.Stop()
	return fl.end, err
}

// Convert turns a gate's log read from r (a pod's gate container's log, as
// kubectl logs or podman logs prints it: the access log on stdout, squid's
// cache log on stderr, interleaved) into JSON audit lines on w. Lines of
// the access log are those that start with a log version; every other line
// is squid's own and is counted in skipped, not converted. A line with the
// version that the parser cannot read is a blocked event, as in a session.
func Convert(r io.Reader, w io.Writer) (skipped int, err error) {
	enc := json.NewEncoder(w)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, LogVersion+" ") && !strings.HasPrefix(line, logVersion1+" ") {
			skipped++
			continue
		}
		e, ok := eventFor(line, "-")
		if !ok {
			continue
		}
		if err := enc.Encode(e); err != nil {
			return skipped, fmt.Errorf("write audit: %w", err)
		}
	}
	if err := sc.Err(); err != nil {
		return skipped, fmt.Errorf("read the gate's log: %w", err)
	}
	return skipped, nil
}
