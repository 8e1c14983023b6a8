// Package tail follows a growing file line by line, the way `tail -f` does.
package tail

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/aisb-dev/aisb/internal/safefile"
)

// Poll is how often a quiet file is looked at again.
const Poll = 100 * time.Millisecond

// Follow calls fn with each complete line of the file at path (without its
// newline) as it is written, until ctx ends; then it reads what is left,
// passes a last unterminated line too, and returns. A file that does not
// exist yet is waited for; it is opened without following a link and must be
// a regular file (another party may write its directory). An error from fn
// ends the follow.
func Follow(ctx context.Context, path string, fn func(line []byte) error) error {
	_, err := follow(ctx, path, fn, Options{})
	return err
}

// FollowAndFree is Follow for a log nobody needs once it has been passed to
// fn: the disk blocks of what was passed are freed (hole-punched) while the
// writer goes on at its own offset, so the log takes no more disk than what
// is not yet passed. A file system that cannot punch holes keeps them.
func FollowAndFree(ctx context.Context, path string, fn func(line []byte) error) error {
	_, err := follow(ctx, path, fn, Options{Free: true})
	return err
}

// Options say how FollowLog follows a log.
type Options struct {
	Free bool  // free what was passed, as FollowAndFree does
	From int64 // start here: where an earlier follower handed off, or 0
	// Handoff, when it reports true at the end, leaves a last unterminated
	// line in the file for whoever continues from the returned offset (the
	// writer is still at work); otherwise that line is passed too.
	Handoff func() bool
}

// FollowLog is Follow with Options; it returns the offset just past what it
// passed to fn, where another follower can continue.
func FollowLog(ctx context.Context, path string, o Options, fn func(line []byte) error) (int64, error) {
	return follow(ctx, path, fn, o)
}

// freeChunk is how much passed log is freed at a time.
const freeChunk = 64 << 10

func follow(ctx context.Context, path string, fn func(line []byte) error, o Options) (int64, error) {
	f, err := open(ctx, path, o.Free)
	if f == nil {
		return o.From, err
	}
	defer f.Close()
	if o.From > 0 {
		if _, err := f.Seek(o.From, io.SeekStart); err != nil {
			return o.From, fmt.Errorf("follow %s: %w", path, err)
		}
	}
	r := bufio.NewReader(f)
	var partial []byte
	passed, freed := o.From, int64(0)
	for {
		line, err := r.ReadBytes('\n')
		partial = append(partial, line...)
		if err == nil {
			if err := fn(bytes.TrimRight(partial, "\r\n")); err != nil {
				return passed, err
			}
			passed += int64(len(partial))
			partial = partial[:0]
			if o.Free && passed-freed >= freeChunk {
				freed = punch(f, passed, freed)
			}
			continue
		}
		if !errors.Is(err, io.EOF) {
			return passed, fmt.Errorf("follow %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			// Drain what was written before the end.
			rest, err := io.ReadAll(r)
			if err != nil {
				return passed, fmt.Errorf("follow %s: %w", path, err)
			}
			rest = append(partial, rest...)
			keepLast := o.Handoff != nil && o.Handoff()
			for len(rest) > 0 {
				l, after, complete := bytes.Cut(rest, []byte("\n"))
				if !complete && keepLast {
					break
				}
				if len(bytes.TrimSpace(l)) > 0 {
					if err := fn(bytes.TrimRight(l, "\r")); err != nil {
						return passed, err
					}
				}
				passed += int64(len(l))
				if complete {
					passed++
				}
				rest = after
			}
			if o.Free {
				punch(f, passed, freed)
			}
			return passed, nil
		case <-time.After(Poll):
		}
	}
}

// punch frees the blocks of the file's first n bytes (rounded down to a
// page), keeping its size; it returns how far the file is freed. Where the
// system cannot punch holes (punchHole fails) nothing is freed.
func punch(f *os.File, n, freed int64) int64 {
	n &^= 4095
	if n <= freed || punchHole(f, n) != nil {
		return freed
	}
	return n
}

// open waits for path to exist; it returns nil, nil when ctx ends first.
func open(ctx context.Context, path string, rw bool) (*os.File, error) {
	for {
		f, err := safefile.OpenLog(path, rw)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("follow %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(Poll):
		}
	}
}
