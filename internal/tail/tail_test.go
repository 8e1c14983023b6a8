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
