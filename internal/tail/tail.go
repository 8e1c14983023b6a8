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
)

// Poll is how often a quiet file is looked at again.
const Poll = 100 * time.Millisecond

// Follow calls fn with each complete line of the file at path (without its
// newline) as it is written, until ctx ends; then it reads what is left,
// passes a last unterminated line too, and returns. A file that does not
// exist yet is waited for. An error from fn ends the follow.
func Follow(ctx context.Context, path string, fn func(line []byte) error) error {
	f, err := open(ctx, path)
	if f == nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var partial []byte
	for {
		line, err := r.ReadBytes('\n')
		partial = append(partial, line...)
		if err == nil {
			if err := fn(bytes.TrimRight(partial, "\r\n")); err != nil {
				return err
			}
			partial = partial[:0]
			continue
		}
		if !errors.Is(err, io.EOF) {
			return fmt.Errorf("follow %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			// Drain what was written before the end.
			rest, err := io.ReadAll(r)
			if err != nil {
				return fmt.Errorf("follow %s: %w", path, err)
			}
			for _, l := range bytes.Split(append(partial, rest...), []byte("\n")) {
				if len(bytes.TrimSpace(l)) > 0 {
					if err := fn(bytes.TrimRight(l, "\r")); err != nil {
						return err
					}
				}
			}
			return nil
		case <-time.After(Poll):
		}
	}
}

// open waits for path to exist; it returns nil, nil when ctx ends first.
func open(ctx context.Context, path string) (*os.File, error) {
	for {
		f, err := os.Open(path)
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
