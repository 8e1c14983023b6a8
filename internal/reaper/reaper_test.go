package reaper

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/state"
)

// TestWait: the watchdog acts on aisb's word, and on aisb's end without one.
func TestWait(t *testing.T) {
	alive := state.Owner()
	if w := Wait(strings.NewReader("finish\n"), alive); w != Finish {
		t.Errorf("finish: %v", w)
	}
	if w := Wait(strings.NewReader("stop\n"), alive); w != Stopped {
		t.Errorf("stop: %v", w)
	}
	if w := Wait(strings.NewReader("remove\n"), alive); w != RemoveSandbox {
		t.Errorf("remove: %v", w)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if w := Wait(strings.NewReader(""), state.OwnerOf(gone.Process.Pid)); w != OwnerGone || time.Since(start) > time.Second {
		t.Errorf("closed without a word by an owner that is gone: %v after %s", w, time.Since(start))
	}
	// A word said just before aisb exited still counts.
	if w := Wait(strings.NewReader("finish\n"), state.OwnerOf(gone.Process.Pid)); w != Finish {
		t.Errorf("finish from a gone owner: %v", w)
	}
	// Open and silent while the owner lives: Wait goes on waiting.
	r, wr, _ := os.Pipe()
	defer wr.Close()
	got := make(chan Wake, 1)
	go func() { got <- Wait(r, alive) }()
	select {
	case w := <-got:
		t.Fatalf("returned %v while aisb lives and said nothing", w)
	case <-time.After(700 * time.Millisecond):
	}
	wr.WriteString("stop\n")
	if w := <-got; w != Stopped {
		t.Errorf("stop after a while: %v", w)
	}
}
