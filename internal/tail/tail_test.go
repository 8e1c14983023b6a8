package tail

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, path, func(l []byte) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, string(l))
			return nil
		})
	}()
	time.Sleep(2 * Poll) // the file does not exist yet: waited for
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("one\ntw")
	time.Sleep(3 * Poll)
	f.WriteString("o\r\nthree") // the last line is unterminated
	time.Sleep(3 * Poll)
	mu.Lock()
	if !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("while following: %q", got)
	}
	mu.Unlock()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"one", "two", "three"}) {
		t.Errorf("after the end: %q", got)
	}
}

// TestFollowLogHandoff: a follower that hands off leaves a line still being
// written to the next one, which continues from the offset it returned:
// every line passed once, none twice, none cut.
func TestFollowLogHandoff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("one\ntwo\nthr")
	var got []string
	collect := func(l []byte) error { got = append(got, string(l)); return nil }
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // ends at once: only the drain runs
	end, err := FollowLog(ctx, path, Options{Free: true, Handoff: func() bool { return true }}, collect)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"one", "two"}) || end != int64(len("one\ntwo\n")) {
		t.Fatalf("first follower: %q, offset %d", got, end)
	}
	f.WriteString("ee\nfour")
	got = nil
	if _, err := FollowLog(ctx, path, Options{Free: true, From: end}, collect); err != nil {
		t.Fatal(err)
	}
	// The writer is gone: its unterminated last line is passed too.
	if !slices.Equal(got, []string{"three", "four"}) {
		t.Fatalf("second follower: %q", got)
	}
}
