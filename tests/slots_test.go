package tests

import (
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// slowFirst names the parallel tests that take longest, longest first
// (seconds on the 2-core machine kind, quiet, from make test's lanes). Go
// starts waiting parallel tests in about the order they are declared, so
// before this list the lane ended on a long test that had started late,
// beside one or two others, while the rest of the machine idled. Started
// first, they overlap the many short tests instead. A test missing here
// only starts in its declared order, as before.
var slowFirst = []string{
	"TestEntrypointInRootlessContainer", // ~100: every network helper, every probe
	"TestEscapeBattery",                 // ~100: every escape, with its control
	// (The remote engines' tests have a lane of their own: tests/run.sh.)
	// ~90: it builds the pi image. The other state tests are not listed:
	// they wait for that build and are short once it is done, so they
	// start in their declared order, late (two of them holding slots
	// while one build ran cost ~30 s).
	"TestStateImport",
	"TestLiveAgentCannotSteer",
	"TestAllowUnenforcedStillEnforces",
	"TestBuildQuietUnlessVerbose", // image builds from nothing
	"TestBuildProgressTerminal",
	"TestCredentials",
	"TestBuildFailureShowsLog",
}

// slots is the shared lane's own limit on tests running at once: tests/run.sh
// sets AISB_TEST_SLOTS and gives go test a -parallel that admits every test,
// so the order tests start in is slots' (slowFirst) and not Go's. Without
// the variable (go test by hand) Go's -parallel alone limits them.
var slots = newSlotter(os.Getenv("AISB_TEST_SLOTS"))

// slotter admits waiting tests by rank as slots free. Go releases every
// paused parallel test at once; the first grant waits settle for them all
// to arrive, so the first slots go by rank too, not to whichever goroutine
// ran first.
type slotter struct {
	mu      sync.Mutex
	free    int
	settled bool
	arrived int
	waiting []*slotWaiter
}

type slotWaiter struct {
	rank  int
	order int
	ready chan struct{}
}

const settle = 200 * time.Millisecond

func newSlotter(n string) *slotter {
	free, err := strconv.Atoi(n)
	if err != nil || free < 1 {
		return nil
	}
	return &slotter{free: free}
}

// acquire waits for a slot for t and gives it back when t and its cleanups
// end (the first cleanup registered runs last).
func (s *slotter) acquire(t *testing.T) {
	t.Helper()
	if s == nil {
		return
	}
	rank := slices.Index(slowFirst, t.Name())
	if rank < 0 {
		rank = len(slowFirst)
	}
	start := time.Now()
	s.wait(rank)
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %v for a slot (AISB_TEST_SLOTS)", waited.Round(time.Second))
	}
	t.Cleanup(s.release)
}

// wait returns once a slot is the caller's, by rank.
func (s *slotter) wait(rank int) {
	s.mu.Lock()
	w := &slotWaiter{rank: rank, order: s.arrived, ready: make(chan struct{})}
	s.arrived++
	s.waiting = append(s.waiting, w)
	if s.arrived == 1 {
		time.AfterFunc(settle, func() {
			s.mu.Lock()
			s.settled = true
			s.grant()
			s.mu.Unlock()
		})
	}
	s.grant()
	s.mu.Unlock()
	<-w.ready
}

func (s *slotter) release() {
	s.mu.Lock()
	s.free++
	s.grant()
	s.mu.Unlock()
}

// grant starts the best-ranked waiting tests while slots are free; s.mu is held.
func (s *slotter) grant() {
	if !s.settled {
		return
	}
	for s.free > 0 && len(s.waiting) > 0 {
		best := 0
		for i, w := range s.waiting {
			b := s.waiting[best]
			if w.rank < b.rank || (w.rank == b.rank && w.order < b.order) {
				best = i
			}
		}
		close(s.waiting[best].ready)
		s.waiting = slices.Delete(s.waiting, best, best+1)
		s.free--
	}
}

// TestSlotsByRank: with one slot, tests that arrive together start best
// rank first, and a slot given back goes to the best waiting.
func TestSlotsByRank(t *testing.T) {
	s := newSlotter("1")
	var mu sync.Mutex
	var got []int
	var wg sync.WaitGroup
	for _, rank := range []int{5, 3, 9, 0, 3} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.wait(rank)
			mu.Lock()
			got = append(got, rank)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			s.release()
		}()
	}
	wg.Wait()
	if want := []int{0, 3, 3, 5, 9}; !slices.Equal(got, want) {
		t.Errorf("started in rank order %v, want %v", got, want)
	}
	if newSlotter("") != nil || newSlotter("0") != nil || newSlotter("x") != nil {
		t.Errorf("a slotter without a valid AISB_TEST_SLOTS, want none (Go's -parallel alone)")
	}
}
