package entrypoint

import (
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// TraceEnv, set to the Unix time in nanoseconds at which its parent started
// the entrypoint (or to anything else: then from main's start), makes the
// entrypoint print where its time went, phase by phase, on stderr, in one
// write just before the exec. It changes nothing else, and the variable
// does not reach the command (BenchmarkEntrypoint reads the lines).
const TraceEnv = "AISB_ENTRYPOINT_TRACE"

// TracePrefix starts each phase's line: "aisb-entrypoint: trace: PHASE MS".
const TracePrefix = "aisb-entrypoint: trace: "

// tracer records phases; the zero tracer (no TraceEnv) and a nil one record
// nothing.
type tracer struct {
	w    io.Writer
	on   bool
	last time.Time
	b    strings.Builder
}

func newTracer(w io.Writer) *tracer {
	v, ok := os.LookupEnv(TraceEnv)
	if !ok {
		return &tracer{}
	}
	os.Unsetenv(TraceEnv)
	t := &tracer{w: w, on: true, last: time.Now()}
	if ns, err := strconv.ParseInt(v, 10, 64); err == nil && ns > 0 {
		t.mark("process start to main", time.Unix(0, ns))
	}
	return t
}

// mark ends a phase: the time since the previous mark (since from, when
// given: the parent's start, for the first one).
func (t *tracer) mark(phase string, from ...time.Time) {
	if t == nil || !t.on {
		return
	}
	now := time.Now()
	start := t.last
	if len(from) > 0 {
		start = from[0]
	}
	t.b.WriteString(TracePrefix + phase + " " + strconv.FormatFloat(float64(now.Sub(start).Microseconds())/1000, 'f', 3, 64) + "\n")
	t.last = now
}

// flush writes what was recorded.
func (t *tracer) flush() {
	if t != nil && t.on && t.b.Len() > 0 {
		io.WriteString(t.w, t.b.String())
		t.b.Reset()
	}
}
