package bench

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkTransparentPath: what the transparent path (no proxy variables:
// the sandbox's resolver and relay carry the connection to the gate by
// name) costs against the proxy path in the same kind of session: 200 small
// HTTPS requests, a new connection each, in alternating rounds, and where
// each path's time goes (the probe's phases, medians).
func BenchmarkTransparentPath(b *testing.B) {
	u := newNetUser(b)
	lat := map[string][]time.Duration{}
	phases := map[string]map[string][]time.Duration{}
	for round := 0; round < 2; round++ {
		for _, p := range transparentPaths(u) {
			var l struct {
				Micros []int64
				Phases map[string][]int64
			}
			if err := u.tryProbeFrom(b, p.start, &l, "latency", "-n", "100", "-warm", "5", upstreamURL+"/"); err != nil {
				b.Fatalf("%s path: %v", p.name, err)
			}
			lat[p.name] = append(lat[p.name], micros(l.Micros)...)
			if phases[p.name] == nil {
				phases[p.name] = map[string][]time.Duration{}
			}
			for k, v := range l.Phases {
				phases[p.name][k] = append(phases[p.name][k], micros(v)...)
			}
		}
	}
	dm, pm := percentile(lat["direct"], 0.5), percentile(lat["proxy"], 0.5)
	report(figure{part: partNetwork, what: fmt.Sprintf("a small HTTPS request without proxy variables (the transparent path), new connection each, median of %d", len(lat["direct"])),
		measured: fmtMs1(dm), baseline: "through the proxy variables: " + fmtMs1(pm), ratio: float64(dm) / float64(pm),
		goal: atMost(1, "median +1 ms or less"), value: ms(dm - pm)})
	note("\nThe transparent path adds %+.2f ms to a request's median against the proxy path. Where each path's time goes (medians, ms):\n\n", ms(dm-pm))
	note("| phase | proxy path | transparent path |\n|---|---|---|\n")
	for _, ph := range []struct{ key, what string }{
		{"dns", "name lookup (A and AAAA, the sandbox's resolver)"},
		{"connect", "TCP connect (to the gate; to the mapped address, the relay)"},
		{"proxy_connect", "CONNECT answered by the gate (the client's own)"},
		{"tls", "TLS handshake (the relay's CONNECT included)"},
		{"request", "request to the response's end"},
		{"other", "outside the phases (the client's own work around them)"},
	} {
		note("| %s | %.2f | %.2f |\n", ph.what, ms(percentile(phases["proxy"][ph.key], 0.5)), ms(percentile(phases["direct"][ph.key], 0.5)))
	}
	note("| whole request | %.2f | %.2f |\n", ms(pm), ms(dm))
}

// transparentPaths are the proxy path and the transparent path ("direct")
// of the same kind of gated session.
func transparentPaths(u *netUser) []struct {
	name  string
	start []string
} {
	return []struct {
		name  string
		start []string
	}{{"proxy", u.session(true)}, {"direct", u.direct()}}
}

// BenchmarkTransparentDownload: one 1 GiB download over the transparent path
// against the proxy path, in alternating rounds. Beside the rate it reports
// the machine's CPU per GiB for each path (every process's, from
// /proc/stat: the client, pasta, the relay, squid, the upstream): on a
// machine whose cores the download keeps busy, the rates' ratio follows
// the CPU's, and the transparent path's extra CPU is the relay's hop.
func BenchmarkTransparentDownload(b *testing.B) {
	u := newNetUser(b)
	const size = 1 << 30
	mbs := map[string][]float64{}
	cpu := map[string][]float64{}
	for round := 0; round < 3; round++ {
		for _, p := range transparentPaths(u) {
			var d struct {
				Bytes   int64
				Seconds float64
			}
			before, err := machineCPU()
			if err != nil {
				b.Fatal(err)
			}
			if err := u.tryProbeFrom(b, p.start, &d, "download", "-n", "1", upstreamURL+"/bytes/"+strconv.Itoa(size)); err != nil {
				b.Fatalf("%s path: %v", p.name, err)
			}
			after, err := machineCPU()
			if err != nil {
				b.Fatal(err)
			}
			if d.Bytes != size {
				b.Fatalf("%s path: %d bytes received, want %d", p.name, d.Bytes, size)
			}
			mbs[p.name] = append(mbs[p.name], float64(d.Bytes)/d.Seconds/1e6)
			// The session's start and end are in the interval too; they
			// cost ~0.1 s of CPU, the same on both paths.
			cpu[p.name] = append(cpu[p.name], (after-before)/(float64(d.Bytes)/(1<<30)))
		}
	}
	mid := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	dt, pt := mid(mbs["direct"]), mid(mbs["proxy"])
	report(figure{part: partNetwork, what: "one 1 GiB HTTPS download without proxy variables (the transparent path)",
		measured: fmt.Sprintf("%.0f MB/s", dt), baseline: fmt.Sprintf("through the proxy variables: %.0f MB/s", pt),
		ratio: dt / pt, goal: atLeast(0.95, "≥ 0.95"), value: dt / pt})
	dc, pc := mid(cpu["direct"]), mid(cpu["proxy"])
	report(figure{part: partNetwork, what: "the machine's CPU per GiB of that download, the transparent path (every process: the session's start and end included)",
		measured: fmt.Sprintf("%.2f s on %d cores", dc, runtime.NumCPU()), baseline: fmt.Sprintf("through the proxy variables: %.2f s", pc),
		ratio: dc / pc, goal: noGoal})
}

// machineCPU is the CPU time every core has spent busy so far, in seconds
// (/proc/stat's first line: user, nice, system, irq, softirq and steal;
// not idle or iowait).
func machineCPU() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q", line)
	}
	var ticks float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system . . irq softirq steal
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q: %v", line, err)
		}
		ticks += v
	}
	return ticks / 100, nil // USER_HZ is 100 on Linux
}
