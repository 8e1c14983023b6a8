package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/entrypoint"
	"github.com/aisb-dev/aisb/internal/netnstest"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// BenchmarkEntrypoint: the entrypoint's own time from its start to the
// command's exec (install, read back, drop, verify; with the relay: its start
// and its check too), as the difference between `nsenter aisb-entrypoint --
// true` and `nsenter true`, each in a fresh namespace, interleaved, and where it
// goes (the entrypoint's trace, TraceEnv, medians of its phases). The status
// file is on the disk, as in a sandbox (the container's upper directory).
func BenchmarkEntrypoint(b *testing.B) {
	ep := testhost.Binary(b, "cmd/aisb-entrypoint")
	dir := b.TempDir()
	pol, polT := filepath.Join(dir, "policy.json"), filepath.Join(dir, "transparent.json")
	os.WriteFile(pol, []byte(`{"version":1,"mode":"allow","gate":{"addr":"100.64.0.1","port":3128}}`), 0o644)
	os.WriteFile(polT, []byte(`{"version":1,"mode":"allow","gate":{"addr":"100.64.0.1","port":3128},"transparent":true}`), 0o644)
	status := filepath.Join(dir, "status", "entrypoint.status")
	// Each run in a namespace of its own, made before it is timed, as each
	// sandbox starts in a fresh one: replacing a table left by the previous
	// run costs the kernel ~8 ms more (the old hooks' removal), which no
	// sandbox pays.
	cases := []struct {
		name string
		argv []string
	}{
		{"true", []string{"/bin/true"}},
		{"allow", []string{ep, "--policy", pol, "--status", status, "--", "/bin/true"}},
		// The relay outlives the entrypoint (the command is its parent
		// then): killed after each run, with everything else in its
		// namespace.
		{"transparent", []string{ep, "--policy", polT, "--status", status, "--resolv-conf", filepath.Join(dir, "resolv.conf"), "--", "/bin/true"}},
	}
	times := map[string][]time.Duration{}
	var traces = map[string][]string{}
	for i := 0; i < 3*runs; i++ {
		for _, c := range cases {
			ns := netnstest.New(b)
			errf, err := os.CreateTemp(dir, "stderr")
			if err != nil {
				b.Fatal(err)
			}
			argv := append([]string{"nsenter", "--net=/run/netns/" + ns.Name}, c.argv...)
			cmd := exec.Command(argv[0], argv[1:]...)
			// A file, not a pipe: the relay keeps its stderr open.
			cmd.Stderr = errf
			start := time.Now()
			cmd.Env = append(os.Environ(), "HTTPS_PROXY=http://aisb:token@100.64.0.1:3128",
				entrypoint.TraceEnv+"="+strconv.FormatInt(start.UnixNano(), 10))
			err = cmd.Run()
			took := time.Since(start)
			killAll(ns)
			out, _ := os.ReadFile(errf.Name())
			errf.Close()
			if err != nil {
				b.Fatalf("%s: %v\n%s", c.name, err, out)
			}
			times[c.name] = append(times[c.name], took)
			traces[c.name] = append(traces[c.name], string(out))
		}
	}
	base := median(times["true"])
	for _, c := range cases[1:] {
		what := "the entrypoint, start to exec (install, read back, drop, verify)"
		if c.name == "transparent" {
			what = "the same with the relay (transparent, as every gated session): its start and check too"
		}
		cost := median(times[c.name]) - base
		report(figure{part: partOther, what: what, measured: fmt.Sprintf("%.1f ms", ms(cost)),
			baseline: fmt.Sprintf("exec of `/bin/true`: %.1f ms", ms(base)), goal: atMost(15, "≤ 15 ms"), value: ms(cost)})
	}
	note("\nWhere the entrypoint's time goes (its trace, medians of %d, ms; `nsenter /bin/true` took %.2f ms):\n\n", len(times["true"]), ms(base))
	note("| phase (the trace's line at its end) | allow | transparent |\n|---|---|---|\n")
	allow, transparent := tracePhases(traces["allow"]), tracePhases(traces["transparent"])
	for _, ph := range transparent.order {
		a := "—"
		if v, ok := allow.ms[ph]; ok {
			a = fmt.Sprintf("%.2f", ms(median(v)))
		}
		note("| %s | %s | %.2f |\n", ph, a, ms(median(transparent.ms[ph])))
	}
	note("| the phases' sum (median of each run's) | %.2f | %.2f |\n", ms(median(allow.sums)), ms(median(transparent.sums)))
	note("| whole command (nsenter, the exec and /bin/true included) | %.2f | %.2f |\n", ms(median(times["allow"])), ms(median(times["transparent"])))
}

// entrypointPhases are the phases of the entrypoint's traces, by name, in
// the order they were first seen.
type entrypointPhases struct {
	order []string
	ms    map[string][]time.Duration
	sums  []time.Duration // each run's phases added up
}

func tracePhases(outputs []string) entrypointPhases {
	p := entrypointPhases{ms: map[string][]time.Duration{}}
	for _, out := range outputs {
		var sum time.Duration
		for _, l := range strings.Split(out, "\n") {
			rest, ok := strings.CutPrefix(l, entrypoint.TracePrefix)
			if !ok {
				continue
			}
			i := strings.LastIndexByte(rest, ' ')
			v, err := strconv.ParseFloat(rest[i+1:], 64)
			if i < 0 || err != nil {
				continue
			}
			name := rest[:i]
			if _, seen := p.ms[name]; !seen {
				p.order = append(p.order, name)
			}
			d := time.Duration(v * float64(time.Millisecond))
			p.ms[name] = append(p.ms[name], d)
			sum += d
		}
		p.sums = append(p.sums, sum)
	}
	return p
}

// killAll kills every process in ns (a transparent entrypoint's relay) and
// waits until none is left.
func killAll(ns *netnstest.NS) {
	for try := 0; try < 500; try++ {
		out, _ := exec.Command("ip", "netns", "pids", ns.Name).Output()
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return
		}
		for _, f := range pids {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}
