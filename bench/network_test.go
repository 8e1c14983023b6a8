package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// The test upstream's HTTPS, by name, verified against its own CA: through
// the gate (which admits allowed.test) and directly in --net open, where the
// sandbox's resolver (network.dns) is the upstream's own.
const upstreamURL = "https://allowed.test"

// netUser is a user whose project holds the probe and the upstream's CA.
type netUser struct {
	*user
	uri string
}

func newNetUser(b *testing.B) *netUser {
	b.Helper()
	u := &netUser{user: newUser(b), uri: testhost.Service(b)}
	probe, err := os.ReadFile(testhost.Binary(b, "bench/probe"))
	if err != nil {
		b.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(testhost.StateDir, "ca.pem"))
	if err != nil {
		b.Fatalf("the test upstream's CA: %v", err)
	}
	for name, f := range map[string]struct {
		data []byte
		mode os.FileMode
	}{"probe": {probe, 0o755}, "ca.pem": {ca, 0o644}} {
		if err := os.WriteFile(filepath.Join(u.Project, name), f.data, f.mode); err != nil {
			b.Fatal(err)
		}
	}
	sandboxImage(b, u.uri) // built before anything is timed
	return u
}

// session is the start of `aisb run` for a command through the gate, or in
// --net open.
func (u *netUser) session(gated bool) []string {
	if gated {
		return []string{"run", "--harness", "shell", "--allow", "allowed.test", "--"}
	}
	return []string{"run", "--net", "open", "--harness", "shell", "--"}
}

// probe runs the probe in a session, through the gate (gated) or in
// --net open, and decodes what it printed into out.
func (u *netUser) probe(b *testing.B, gated bool, out any, args ...string) {
	b.Helper()
	if err := u.tryProbe(b, gated, out, args...); err != nil {
		b.Fatal(err)
	}
}

// direct is the start of `aisb run` through the gate with every proxy
// variable unset: the probe's connections take the transparent path (the
// sandbox's resolver and relay), not the proxy.
func (u *netUser) direct() []string {
	argv := append(u.session(true), "env")
	for _, v := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"} {
		argv = append(argv, "-u", v)
	}
	return argv
}

func (u *netUser) tryProbe(b *testing.B, gated bool, out any, args ...string) error {
	b.Helper()
	return u.tryProbeFrom(b, u.session(gated), out, args...)
}

// tryProbeFrom runs the probe after start (a session's argv up to its
// command) and decodes what it printed into out.
func (u *netUser) tryProbeFrom(b *testing.B, start []string, out any, args ...string) error {
	b.Helper()
	argv := append(append(slices.Clone(start), "/project/probe", args[0], "-ca", "/project/ca.pem"), args[1:]...)
	stdout, _, err := u.output(u.uri, argv...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		return fmt.Errorf("probe %v printed %q: %v", args, stdout, err)
	}
	return nil
}

func micros(v []int64) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x) * time.Microsecond
	}
	return d
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// lastLine is the last line of s that says something: the probe's error.
func lastLine(s string) string {
	for _, l := range slices.Backward(strings.Split(s, "\n")) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "aisb: trace:") {
			return l
		}
	}
	return s
}

func fmtMs1(d time.Duration) string { return fmt.Sprintf("%.2f ms", ms(d)) }

// BenchmarkRequestLatency: what a request gains through the gate. 200 small
// HTTPS requests, each on a new connection (so each pays the gate's CONNECT),
// through the gate and in --net open, in alternating rounds.
func BenchmarkRequestLatency(b *testing.B) {
	u := newNetUser(b)
	var gated, open []time.Duration
	for round := 0; round < 2; round++ {
		for _, g := range []bool{true, false} {
			var l struct{ Micros []int64 }
			u.probe(b, g, &l, "latency", "-n", "100", "-warm", "5", upstreamURL+"/")
			if g {
				gated = append(gated, micros(l.Micros)...)
			} else {
				open = append(open, micros(l.Micros)...)
			}
		}
	}
	gm, om := percentile(gated, 0.5), percentile(open, 0.5)
	gp, op := percentile(gated, 0.99), percentile(open, 0.99)
	diff := ms(gm - om)
	report(figure{part: partNetwork, what: fmt.Sprintf("a small HTTPS request through the gate, new connection each, median of %d", len(gated)),
		measured: fmtMs1(gm), baseline: "`--net open`: " + fmtMs1(om), ratio: float64(gm) / float64(om),
		goal: atMost(1, "median +1 ms or less"), value: diff})
	report(figure{part: partNetwork, what: "the same, 99th percentile", measured: fmtMs1(gp), baseline: "`--net open`: " + fmtMs1(op),
		ratio: float64(gp) / float64(op), goal: noGoal})
	note("\nThe gate adds %+.2f ms to a request's median (%+.2f ms at the 99th percentile).\n", diff, ms(gp-op))
}

// BenchmarkThroughput: downloads from the test upstream through one gate
// against the same in --net open: one stream of 1 GiB (by the probe, a Go
// client, and by curl, whose OpenSSL client is slower and so hides more of
// the gate's cost), and 8 side by side of 256 MiB each; the median of 3
// alternating rounds.
func BenchmarkThroughput(b *testing.B) {
	u := newNetUser(b)
	probe := func(streams int, size int64) func(bool) (float64, error) {
		return func(gated bool) (float64, error) {
			var d struct {
				Bytes   int64
				Seconds float64
			}
			if err := u.tryProbe(b, gated, &d, "download", "-n", strconv.Itoa(streams), upstreamURL+"/bytes/"+strconv.FormatInt(size, 10)); err != nil {
				return 0, err
			}
			if d.Bytes != int64(streams)*size {
				return 0, fmt.Errorf("%d bytes received, want %d", d.Bytes, int64(streams)*size)
			}
			return float64(d.Bytes) / d.Seconds / 1e6, nil
		}
	}
	curl := func(size int64) func(bool) (float64, error) {
		return func(gated bool) (float64, error) {
			stdout, _, err := u.output(u.uri, append(u.session(gated), "curl", "-sS", "--cacert", "/project/ca.pem", "-o", "/dev/null",
				"-w", "%{size_download} %{speed_download}", upstreamURL+"/bytes/"+strconv.FormatInt(size, 10))...)
			if err != nil {
				return 0, err
			}
			var got int64
			var speed float64
			if _, err := fmt.Sscan(stdout, &got, &speed); err != nil || got != size {
				return 0, fmt.Errorf("curl printed %q, want %d bytes", stdout, size)
			}
			return speed / 1e6, nil
		}
	}
	for _, c := range []struct {
		what string
		run  func(gated bool) (float64, error)
		goal goal
	}{
		{"one 1 GiB HTTPS download through the gate's CONNECT tunnel", probe(1, 1<<30), atLeast(0.9, "≥ 0.9")},
		{"the same by curl", curl(1 << 30), atLeast(0.9, "≥ 0.9")},
		{"8 parallel 256 MiB HTTPS downloads through one gate (in all)", probe(8, 256<<20), atLeast(0.9, "≥ 0.9")},
	} {
		var gated, open []float64
		failed := map[bool][]string{}
		for round := 0; round < 3; round++ {
			for _, g := range []bool{true, false} {
				// A download that fails is tried again, twice at most, and
				// said: pasta (in both modes) has been seen to reset one of
				// 8 parallel connections now and then on this machine.
				var mbs float64
				for try := 0; ; try++ {
					var err error
					if mbs, err = c.run(g); err == nil {
						break
					}
					if try == 2 {
						b.Fatalf("%s: %v", c.what, err)
					}
					failed[g] = append(failed[g], lastLine(err.Error()))
				}
				if g {
					gated = append(gated, mbs)
				} else {
					open = append(open, mbs)
				}
			}
		}
		for _, g := range []bool{true, false} {
			if len(failed[g]) > 0 {
				note("\n%s, %s: %d of %d runs failed and were run again: %s\n", c.what, map[bool]string{true: "through the gate", false: "`--net open`"}[g],
					len(failed[g]), 3+len(failed[g]), strings.Join(failed[g], "; "))
			}
		}
		slices.Sort(gated)
		slices.Sort(open)
		g, o := gated[1], open[1]
		report(figure{part: partNetwork, what: c.what, measured: fmt.Sprintf("%.0f MB/s", g), baseline: fmt.Sprintf("`--net open`: %.0f MB/s", o),
			ratio: g / o, goal: c.goal, value: g / o})
	}
}

// BenchmarkStreamFirstEvent: a server-sent event stream (as the model APIs
// use), time to its first event through the gate against --net open: a gate
// that buffered the response would hold the event back.
func BenchmarkStreamFirstEvent(b *testing.B) {
	u := newNetUser(b)
	var gated, open, gatedByte, openByte []time.Duration
	for round := 0; round < 2; round++ {
		for _, g := range []bool{true, false} {
			var s struct {
				FirstEvent []int64 `json:"first_event_micros"`
				FirstByte  []int64 `json:"first_byte_after_request_micros"`
			}
			u.probe(b, g, &s, "stream", "-n", "10", "-warm", "2", upstreamURL+"/sse")
			if g {
				gated, gatedByte = append(gated, micros(s.FirstEvent)...), append(gatedByte, micros(s.FirstByte)...)
			} else {
				open, openByte = append(open, micros(s.FirstEvent)...), append(openByte, micros(s.FirstByte)...)
			}
		}
	}
	gm, om := median(gated), median(open)
	report(figure{part: partNetwork, what: fmt.Sprintf("a streamed response (the upstream's /sse): time to its first event, new connection, median of %d", len(gated)),
		measured: fmtMs1(gm), baseline: "`--net open`: " + fmtMs1(om), ratio: float64(gm) / float64(om),
		goal: atMost(5, "within 5 ms"), value: ms(gm - om)})
	gb, ob := median(gatedByte), median(openByte)
	report(figure{part: partNetwork, what: "the same, from the request sent to the response's first byte", measured: fmtMs1(gb), baseline: "`--net open`: " + fmtMs1(ob),
		ratio: float64(gb) / float64(ob), goal: atMost(5, "within 5 ms"), value: ms(gb - ob)})
}
