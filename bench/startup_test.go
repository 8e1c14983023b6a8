package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// srtVersion is the sandbox-runtime bench/setup.sh installs, and srtBin where.
const srtVersion = "0.0.83"

var srtBin = "/var/cache/aisb-bench/srt-" + srtVersion + "/node_modules/.bin/srt"

// startRuns: every start-up figure is the median of this many runs.
const startRuns = 10

// A startCase is one way of starting a sandbox that runs `true`.
type startCase struct {
	name string
	run  func() (stderr string, err error)
}

// BenchmarkStartup: `aisb run -- true` in each network mode, with and
// without a Podman service of the user's listening, against the same
// container started by podman itself and against the same command under
// sandbox-runtime (srt), interleaved so every case sees the same machine.
func BenchmarkStartup(b *testing.B) {
	u := newUser(b)
	uri := testhost.Service(b)
	img := sandboxImage(b, uri)
	if err := u.aisb(b, uri, "gate", "up", "bench"); err != nil {
		b.Fatal(err)
	}
	defer u.aisb(b, uri, "gate", "down", "bench")
	aisb := func(service string, args ...string) func() (string, error) {
		return func() (string, error) {
			_, stderr, err := u.output(service, append(append([]string{"run", "--harness", "shell"}, args...), "--", "true")...)
			return stderr, err
		}
	}
	// aisb shares one Podman service among a user's aisb processes with the
	// same environment, for a minute after the last: a variable of its own
	// per run (PODMAN_*, part of the service's key, meaningless to Podman)
	// makes each run the first in a minute, which starts the service.
	// The shared service outlives 10 minutes without aisb
	// (engine.SharedIdle): each cold run's is stopped before the next case
	// (untimed, once its watchdog is done: the watchdog's removals use that
	// service too, and would start it again), so that the run leaves no
	// service behind and the next cold run starts its own.
	cold := 0
	aisbCold := func() (string, error) {
		cold++
		env := fmt.Sprintf("PODMAN_AISB_BENCH_COLD=%d", cold)
		_, stderr, err := u.outputEnv("", []string{env}, "run", "--harness", "shell", "--", "true")
		return stderr, err
	}
	// The README's first command: a harness's key set by the gate, which
	// then bumps that host (a session CA, squid's certificate helper, the
	// upstream trust store). The key is a placeholder: nothing is sent.
	aisbCredential := func() (string, error) {
		_, stderr, err := u.outputEnv("", []string{"ANTHROPIC_API_KEY=aisb-bench-placeholder"}, "run", "--harness", "shell", "--credential", "ANTHROPIC_API_KEY", "--", "true")
		return stderr, err
	}
	podman := func(args ...string) func() (string, error) {
		return func() (string, error) { return "", podmanCLI(args...)() }
	}
	cases := []startCase{
		{"podman-pasta", podman("run", "--rm", "--network=pasta", "--entrypoint=true", img)},
		{"podman-none", podman("run", "--rm", "--network=none", "--entrypoint=true", img)},
		{"allow", aisb("")},
		{"allow-next", aisb("")}, // at once after "allow": see settle
		{"allow-cold", aisbCold},
		{"allow-service", aisb(uri)},
		{"credential", aisbCredential},
		{"gate", aisb("", "--gate", "bench")},
		{"gate-service", aisb(uri, "--gate", "bench")},
		{"none", aisb("", "--net", "none")},
		{"none-service", aisb(uri, "--net", "none")},
	}
	srtRun, srtWhy := srt(b, u)
	if srtRun != nil {
		cases = append(cases, startCase{"srt", srtRun})
	}
	times := map[string][]time.Duration{}
	var traces []string
	for i := -1; i < startRuns; i++ { // run -1 warms up
		for _, c := range cases {
			if c.name != "allow-next" {
				settle(b)
				stopKeepers(b, coldEnv)
			}
			start := time.Now()
			stderr, err := c.run()
			if err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
			if i < 0 {
				continue
			}
			times[c.name] = append(times[c.name], time.Since(start))
			if c.name == "allow" {
				traces = append(traces, stderr)
			}
		}
	}
	settle(b)
	stopKeepers(b, coldEnv)
	med := func(name string) time.Duration { return median(times[name]) }
	row := func(what, name, baseText, base string, g goal) {
		r := float64(med(name)) / float64(med(base))
		report(figure{part: partStartup, what: what, measured: fmtMs(med(name)), baseline: fmt.Sprintf("%s: %s", baseText, fmtMs(med(base))), ratio: r, goal: g, value: r})
	}
	pasta, none := "`podman run --rm --network=pasta IMAGE true`", "`podman run --rm --network=none IMAGE true`"
	row("start-up, `aisb run --net allow -- true`, no user Podman service (aisb's shared one, running)", "allow", pasta, "podman-pasta", atMost(1.3, "≤ 1.3"))
	row("the same, started at once after the previous one (whose watchdog still finishes it)", "allow-next", pasta, "podman-pasta", atMost(1.3, "≤ 1.3"))
	row("the same, the first in 10 minutes (aisb starts its shared service; the first in a minute finds it running: the first row)", "allow-cold", pasta, "podman-pasta", atMost(1.3, "≤ 1.3"))
	row("the same, the user's Podman service listening", "allow-service", pasta, "podman-pasta", atMost(1.3, "≤ 1.3"))
	row("the same with a key the gate sets (`--credential ANTHROPIC_API_KEY`: its host bumped), no user service", "credential", pasta, "podman-pasta", atMost(1.3, "≤ 1.3"))
	row("start-up, `aisb run --gate NAME -- true` (long-lived gate), no user service", "gate", pasta, "podman-pasta", atMost(1.1, "≤ 1.1"))
	row("the same, the user's Podman service listening", "gate-service", pasta, "podman-pasta", atMost(1.1, "≤ 1.1"))
	row("start-up, `aisb run --net none -- true`, no user service", "none", none, "podman-none", atMost(1.1, "≤ 1.1"))
	row("the same, the user's Podman service listening", "none-service", none, "podman-none", atMost(1.1, "≤ 1.1"))
	srtWhat := "start-up, `srt -- true` (sandbox-runtime " + srtVersion + ", allowedDomains: allowed.test)"
	vsSrt := "aisb against the peer: `aisb run --net allow -- true`, no user service"
	if srtRun == nil {
		notMeasured(partStartup, srtWhat, pasta, noGoal, srtWhy)
		notMeasured(partStartup, vsSrt, "`srt -- true`", atMost(0.5, "≤ 0.5"), srtWhy)
	} else {
		row(srtWhat, "srt", pasta, "podman-pasta", noGoal)
		row(vsSrt, "allow", "`srt -- true`", "srt", atMost(0.5, "≤ 0.5"))
	}
	phases(traces, med("allow"))
	idleService(b)
}

// coldEnv starts the variable that makes each cold run's service its own.
const coldEnv = "PODMAN_AISB_BENCH_COLD="

// stopKeepers stops the shared services whose keeper's environment holds
// env (a variable's whole "NAME=" for any value of it), and waits (at most
// 10 s) until they are gone.
func stopKeepers(b *testing.B, env string) {
	b.Helper()
	pids := testhost.Keepers(env)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	for deadline := time.Now().Add(10 * time.Second); len(testhost.Keepers(env)) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the shared service of %s did not stop within 10 s of SIGTERM", env)
		}
	}
}

// idleService reports what the bench user's shared service (its keeper and
// its `podman system service`) holds in memory while no aisb uses it: what
// the 10 minutes it outlives the last aisb cost.
func idleService(b *testing.B) {
	b.Helper()
	time.Sleep(2 * time.Second) // the last session's watchdog done, the service idle
	var rss, pss int64
	n := 0
	// The newest keeper without the cold runs' variable is this run's (an
	// earlier run's may still idle).
	newest, newestStart := 0, int64(-1)
	for _, k := range testhost.Keepers("") {
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", k))
		if strings.Contains(string(environ), coldEnv) {
			continue
		}
		if st := startTicks(k); st > newestStart {
			newest, newestStart = k, st
		}
	}
	if newest != 0 {
		for _, pid := range append([]int{newest}, testhost.ChildPids(newest)...) {
			r, p, ok := residentKB(pid)
			if ok {
				rss, pss, n = rss+r, pss+p, n+1
			}
		}
	}
	if n < 2 {
		notMeasured(partStartup, "aisb's shared service, idle (its keeper and Podman's service), resident", "—", noGoal, fmt.Sprintf("found %d of its 2 processes", n))
		return
	}
	report(figure{part: partStartup, what: "aisb's shared service, idle (its keeper and Podman's service), resident: what outliving the last aisb by 10 minutes costs",
		measured: fmt.Sprintf("%.0f MB (%.0f MB proportional)", float64(rss)/1024, float64(pss)/1024), baseline: "—", goal: noGoal})
}

// startTicks is when pid started, in clock ticks since boot (-1 if gone).
func startTicks(pid int) int64 {
	f := procStat(pid)
	if f == nil {
		return -1
	}
	v, _ := strconv.ParseInt(f[19], 10, 64)
	return v
}

// residentKB reads a process's resident and proportional set sizes.
func residentKB(pid int) (rss, pss int64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			rss = v
		case "Pss:":
			pss = v
		}
	}
	return rss, pss, true
}

// settle waits until what the previous case left to finish off the user's
// path is done (a session's watchdog removing its gate and sandbox, Podman's
// cleanup of an exited container), at most 5 s, so that each case is
// measured on a quiet machine: that work is real, but it is not the start-up
// of the next case. The "allow-next" case measures a session started while
// it still runs.
func settle(b *testing.B) {
	b.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !running("internal-watchdog", "container cleanup") {
			break
		}
	}
	time.Sleep(100 * time.Millisecond)
}

// running reports whether a process whose command line holds one of words runs.
func running(words ...string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		for _, w := range words {
			if strings.Contains(cmdline, w) {
				return true
			}
		}
	}
	return false
}

func fmtMs(d time.Duration) string { return fmt.Sprintf("%.0f ms", ms(d)) }

// srt returns how to run `srt -- true` as the test user in the project
// directory, with an allowlist like the session's, or why it cannot run. A
// control run first proves srt really isolates (a network namespace of its
// own), so its figure is that of a sandbox, not of a wrapper that failed open.
func srt(b *testing.B, u *user) (func() (string, error), string) {
	b.Helper()
	if _, err := os.Stat(srtBin); err != nil {
		return nil, fmt.Sprintf("srt %s is not installed at %s (bench/setup.sh installs it)", srtVersion, srtBin)
	}
	settings := filepath.Join(u.Project, "srt-settings.json")
	if err := os.WriteFile(settings, []byte(`{"network":{"allowedDomains":["allowed.test"],"deniedDomains":[]},"filesystem":{"denyRead":[],"allowWrite":["."],"denyWrite":[]}}`), 0o644); err != nil {
		b.Fatal(err)
	}
	run := func(argv ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := testhost.UserCommand(ctx, argv...)
		cmd.Dir = u.Project
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("%v: %v: %s", argv, err, firstLine(string(out)))
		}
		return string(out), nil
	}
	outside, err := run("readlink", "/proc/self/ns/net")
	if err != nil {
		b.Fatal(err)
	}
	inside, err := run(srtBin, "--settings", settings, "-c", "readlink /proc/self/ns/net")
	if err != nil {
		return nil, fmt.Sprintf("srt fails here: %v", err)
	}
	if strings.TrimSpace(inside) == strings.TrimSpace(outside) || !strings.HasPrefix(strings.TrimSpace(inside), "net:") {
		return nil, fmt.Sprintf("srt ran its command without a network namespace of its own (%q)", firstLine(inside))
	}
	return func() (string, error) { return run(srtBin, "--settings", settings, "true") }, ""
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// traceLine is what AISB_TRACE=1 prints at the end of each phase.
var traceLine = regexp.MustCompile(`aisb: trace: +([0-9.]+) ms (.+)`)

// phases notes where a session's start-up goes: the median of each traced
// phase over the runs, and what lies outside the traced part.
func phases(traces []string, wall time.Duration) {
	var order []string
	per := map[string][]time.Duration{}
	var done []time.Duration
	for _, t := range traces {
		prev := 0.0
		for _, m := range traceLine.FindAllStringSubmatch(t, -1) {
			at, _ := strconv.ParseFloat(m[1], 64)
			name := m[2]
			if _, ok := per[name]; !ok {
				order = append(order, name)
			}
			per[name] = append(per[name], time.Duration((at-prev)*float64(time.Millisecond)))
			prev = at
			if name == "done" {
				done = append(done, time.Duration(at*float64(time.Millisecond)))
			}
		}
	}
	if len(order) == 0 {
		note("\nNo AISB_TRACE phases were printed: the start-up's phases are not known.\n")
		return
	}
	note("\n### Where `aisb run --net allow -- true` spends its time (no user Podman service, aisb's shared one running; AISB_TRACE=1, medians of %d)\n\n", len(traces))
	note("| phase (the trace's line at its end) | ms |\n|---|---|\n")
	for _, name := range order {
		note("| %s | %.1f |\n", name, ms(median(per[name])))
	}
	if len(done) > 0 {
		note("| outside the trace: runuser, process start, configuration, exit | %.1f |\n", ms(wall-median(done)))
	}
	note("| whole command (median) | %.1f |\n", ms(wall))
}
