package state

import (
	"os"
	"testing"
	"time"
)

func TestWaitNoStart(t *testing.T) {
	p := Paths{Runtime: t.TempDir()}
	took := func(max time.Duration) time.Duration {
		start := time.Now()
		p.WaitNoStart(max)
		return time.Since(start)
	}
	if d := took(2 * time.Second); d > 500*time.Millisecond {
		t.Fatalf("no session starting: waited %v", d)
	}
	release := p.Starting()
	if d := took(300 * time.Millisecond); d < 300*time.Millisecond {
		t.Fatalf("a session starting: waited only %v, want the whole 300ms", d)
	}
	// A second session starting at once is not held up by the first.
	done := make(chan func())
	go func() { done <- p.Starting() }()
	select {
	case r2 := <-done:
		r2()
	case <-time.After(2 * time.Second):
		t.Fatal("a second session's start waited for the first")
	}
	go func() { time.Sleep(100 * time.Millisecond); release() }()
	if d := took(5 * time.Second); d > 2*time.Second {
		t.Fatalf("the start ended after 100ms: waited %v", d)
	}
}

func TestStartingWithoutRuntimeDir(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var p Paths
	p.Starting()()
	p.WaitNoStart(time.Second)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("made %v without a runtime directory", entries)
	}
}
