package bench

// This file is over 300 lines because the scale row is one procedure that
// must stay readable in one place: the start of twenty sessions at a
// barrier, the proof each is enforced, the gates' memory while all are up,
// and the audit of what is left afterwards, with the baselines beside it.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// scaleSessions is how many gated sessions BenchmarkScale starts at once.
const scaleSessions = 20

// The address a session tries directly: the test upstream's HTTPS by IP
// literal, which the sandbox's table must refuse (the gate is the only way
// out) while the same upstream answers through the gate by name.
var scaleDirect = net.JoinHostPort(testhost.UpstreamAddr, "443")

// launched is one command started at the barrier: when its first line came,
// what it printed, how it ended.
type launched struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	first time.Duration // from the barrier to the first line of stdout; 0: none yet
	ended time.Duration // from the barrier to the command's exit, once done
	lines []string
	err   error
	done  chan struct{}
	stder strings.Builder
}

func (l *launched) snapshot() (first time.Duration, lines []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first, slices.Clone(l.lines)
}

func (l *launched) exited() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func (l *launched) String() string {
	_, lines := l.snapshot()
	return fmt.Sprintf("%v\nstdout:\n%s\nstderr:\n%s", l.err, strings.Join(lines, "\n"), l.stder.String())
}

// launch starts cmds together: every goroutine waits at one barrier, and
// each command's first line is timed from it.
func launch(b *testing.B, cmds []*exec.Cmd) []*launched {
	b.Helper()
	out := make([]*launched, len(cmds))
	barrier := make(chan struct{})
	var at time.Time
	var ready sync.WaitGroup
	for i, cmd := range cmds {
		l := &launched{cmd: cmd, done: make(chan struct{})}
		out[i] = l
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stderr = &l.stder
		ready.Add(1)
		go func() {
			defer close(l.done)
			ready.Done()
			<-barrier
			if l.err = cmd.Start(); l.err != nil {
				return
			}
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				l.mu.Lock()
				if l.first == 0 {
					l.first = time.Since(at)
				}
				l.lines = append(l.lines, sc.Text())
				l.mu.Unlock()
			}
			l.err = cmd.Wait()
			l.ended = time.Since(at)
		}()
	}
	ready.Wait()
	at = time.Now()
	close(barrier)
	return out
}

// waitAll waits until cond holds for every one of ls, or one has exited
// without it, or within has passed; it reports whether all met it.
func waitAll(ls []*launched, within time.Duration, cond func(*launched) bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		all := true
		for _, l := range ls {
			if cond(l) {
				continue
			}
			if l.exited() || !time.Now().Before(deadline) {
				return false
			}
			all = false
		}
		if all {
			return true
		}
	}
}

// enforcedResult is the probe's second line (bench/probe, enforced).
type enforcedResult struct {
	DirectConnected bool   `json:"direct_connected"`
	Direct          string `json:"direct"`
	Proxy           string `json:"proxy"`
	Status          int    `json:"status"`
	Error           string `json:"error"`
}

func (l *launched) result() (enforcedResult, bool) {
	_, lines := l.snapshot()
	var r enforcedResult
	if len(lines) < 2 || lines[0] != "started" || json.Unmarshal([]byte(lines[1]), &r) != nil {
		return r, false
	}
	return r, true
}

// BenchmarkScale: twenty `aisb run --allow allowed.test` started at once on
// this machine, one user, twenty projects. Each session proves it is
// enforced (a direct connection to the upstream refused, a request by name
// answered through its gate) and holds until all are up; meanwhile the
// benchmark sums the twenty gates' memory. Then all end, and once their
// watchdogs are done nothing of them may be left.
func BenchmarkScale(b *testing.B) {
	u := newUser(b)
	uri := testhost.Service(b)
	c := connect(b, uri)
	img := sandboxImage(b, uri)
	uid := testUID(b)
	probe, err := os.ReadFile(testhost.Binary(b, "bench/probe"))
	if err != nil {
		b.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(testhost.StateDir, "ca.pem"))
	if err != nil {
		b.Fatalf("the test upstream's CA: %v", err)
	}
	projects := make([]string, scaleSessions)
	for i := range projects {
		projects[i] = testhost.UserDir(b)
		testhost.WriteUserFile(b, filepath.Join(projects[i], "ca.pem"), string(ca))
		testhost.WriteUserFile(b, filepath.Join(projects[i], "probe"), string(probe))
		os.Chmod(filepath.Join(projects[i], "probe"), 0o755)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	session := func(project string, net ...string) *exec.Cmd {
		a := u.Aisb
		a.Project = project
		args := append(append([]string{"run", "--harness", "shell"}, net...), "--", "/project/probe", "enforced", "-ca", "/project/ca.pem",
			"-direct", scaleDirect, "-hold", "/project/go", upstreamURL+"/")
		return a.Command(b, ctx, "", []string{"AISB_TRACE=1"}, args...)
	}

	// The control of the block: the upstream's 443 answers a direct
	// connection from the host, and from a sandbox without the table.
	conn, err := net.DialTimeout("tcp", scaleDirect, 3*time.Second)
	if err != nil {
		b.Fatalf("control: the upstream's %s is not reachable from the host: %v", scaleDirect, err)
	}
	conn.Close()

	// The baselines: a bare `podman run` of the same image to its first
	// line, alone (the median of 5) and twenty at once.
	bare := func() *exec.Cmd {
		return testhost.UserCommand(ctx, "podman", "run", "--rm", "--network=pasta", "--entrypoint=echo", img, "started")
	}
	var alone, aloneExit []time.Duration
	for i := 0; i < 5; i++ {
		settleUser(b, uid, 30*time.Second)
		l := launch(b, []*exec.Cmd{bare()})[0]
		<-l.done
		first, _ := l.snapshot()
		if l.err != nil || first == 0 {
			b.Fatalf("bare podman run: %s", l)
		}
		alone, aloneExit = append(alone, first), append(aloneExit, l.ended)
	}
	settleUser(b, uid, 30*time.Second)
	bares := launch(b, slices.Collect(func(yield func(*exec.Cmd) bool) {
		for range scaleSessions {
			yield(bare())
		}
	}))
	var bareStarts []time.Duration
	for i, l := range bares {
		<-l.done
		first, _ := l.snapshot()
		if l.err != nil || first == 0 {
			b.Fatalf("bare podman run %d of %d at once: %s", i+1, scaleSessions, l)
		}
		bareStarts = append(bareStarts, first)
	}

	// The control session (--net open: no table) also starts aisb's
	// shared Podman service, which the twenty then find running.
	settleUser(b, uid, 30*time.Second)
	testhost.WriteUserFile(b, filepath.Join(projects[0], "go"), "")
	open := launch(b, []*exec.Cmd{session(projects[0], "--net", "open")})[0]
	<-open.done
	if r, ok := open.result(); open.err != nil || !ok || !r.DirectConnected || r.Status != 200 {
		b.Fatalf("control: in --net open the direct connection to %s and the request must get through: %s", scaleDirect, open)
	}
	os.Remove(filepath.Join(projects[0], "go"))
	settleUser(b, uid, 30*time.Second)
	before := takeStock(b, c, u, uid)
	if len(before.containers) > 0 {
		b.Fatalf("aisb containers of %s before the burst: %v", testhost.User, before.containers)
	}

	load := loadavg()
	var cmds []*exec.Cmd
	for _, p := range projects {
		cmds = append(cmds, session(p, "--allow", "allowed.test"))
	}
	runs := launch(b, cmds)
	release := func() {
		for _, p := range projects {
			os.WriteFile(filepath.Join(p, "go"), nil, 0o644)
		}
	}
	defer release() // a failure never leaves the sessions holding
	allUp := waitAll(runs, 10*time.Minute, func(l *launched) bool { _, ok := l.result(); return ok })
	var mem gateMemory
	if allUp {
		mem = measureGates(b, c)
		for _, m := range mem.unmeasured {
			b.Errorf("a container's processes not found: %s", m)
		}
	}
	loadUp := loadavg()
	if allUp {
		// The control of the check for what is left: while all are up it
		// finds every session's two containers and its running mark.
		var containers, marked int
		during, _ := leftovers(b, c, u, uid, before, mem)
		for _, l := range during {
			if strings.HasPrefix(l, "container ") {
				containers++
			}
			if strings.Contains(l, "still marked running") {
				marked++
			}
		}
		if containers != 2*scaleSessions || marked != scaleSessions {
			b.Errorf("control: while all %d sessions are up the check for what is left sees %d containers (want %d) and %d running sessions (want %d)",
				scaleSessions, containers, 2*scaleSessions, marked, scaleSessions)
		}
	}
	release()
	var starts []time.Duration
	enforced := 0
	gates, directs := map[string]int{}, map[string]int{}
	for i, l := range runs {
		select {
		case <-l.done:
		case <-time.After(5 * time.Minute):
			b.Errorf("session %d of %d did not end 5 min after its hold was released", i+1, scaleSessions)
			l.cmd.Process.Kill()
			<-l.done
		}
		first, _ := l.snapshot()
		r, ok := l.result()
		switch {
		case l.err != nil || !ok:
			b.Errorf("session %d of %d failed: %s", i+1, scaleSessions, l)
		case r.DirectConnected || r.Status != 200 || r.Proxy == "":
			b.Errorf("session %d of %d is not enforced (direct: %q, through %q: status %d %s)", i+1, scaleSessions, r.Direct, r.Proxy, r.Status, r.Error)
		default:
			enforced++ // and in its gate's audit, checked below
			gates[r.Proxy]++
			directs[r.Direct]++
		}
		if first > 0 {
			starts = append(starts, first)
		}
	}
	for proxy, n := range gates {
		if n > 1 {
			b.Errorf("%d sessions went through the same gate %s: each must have its own", n, proxy)
		}
	}
	var how []string
	for d, n := range directs {
		how = append(how, fmt.Sprintf("%d× %q", n, d))
	}
	slices.Sort(how)
	note("\nTwenty at once, how the direct connections to %s ended: %s.\n", scaleDirect, strings.Join(how, ", "))
	scalePhases(runs)
	var cpu []time.Duration
	for _, l := range runs {
		if st := l.cmd.ProcessState; st != nil {
			cpu = append(cpu, st.UserTime()+st.SystemTime())
		}
	}
	if len(cpu) > 0 {
		note("\nTwenty at once: each `aisb run` used %s of CPU (median; the slowest %s), itself and what it waited for, not its watchdog.\n", fmtMs(median(cpu)), fmtMs(slices.Max(cpu)))
	}
	exited := time.Now()
	finished := settleUser(b, uid, 3*time.Minute)
	finish := time.Since(exited)
	// What a process's parent has not yet collected, or Podman removes in
	// its own time after a watchdog's call returned, gets 10 s more.
	var left, wedged []string
	testhost.WaitFor(10*time.Second, func() error {
		if left, wedged = leftovers(b, c, u, uid, before, mem); len(left) > 0 {
			return fmt.Errorf("%d left", len(left))
		}
		return nil
	})
	if !finished {
		left = append(left, "watchdogs or Podman cleanups still running 3 min after the sessions ended")
	}
	for _, l := range left {
		b.Errorf("left after the burst: %s", l)
	}
	// Each session's request is in its gate's audit: the gate, not some
	// other way out, answered it.
	audited := 0
	for id := range takeStock(b, c, u, uid).sessions {
		if before.sessions[id] {
			continue
		}
		data, _ := os.ReadFile(filepath.Join(userPaths(u).AuditDir(), id+".jsonl"))
		if strings.Contains(string(data), `"event":"network_allowed","method":"CONNECT","host":"allowed.test","port":443,"status":200`) {
			audited++
		} else {
			b.Errorf("session %s: its gate's audit has no allowed CONNECT allowed.test:443: %q", id, data)
		}
	}
	if audited != scaleSessions {
		b.Errorf("%d of %d sessions' audits hold their request", audited, scaleSessions)
	}
	for _, w := range wedged {
		note("\nTwenty at once, not counted as left (Podman's, see leftovers in bench/stock_test.go): %s.\n", w)
	}
	if !allUp {
		b.Errorf("not all %d sessions came up together: memory not measured", scaleSessions)
	}

	what := fmt.Sprintf("%d `aisb run --allow allowed.test` started at once (one user, %d projects): from the start to the session's first line", scaleSessions, scaleSessions)
	baseAlone := fmt.Sprintf("`podman run --rm --network=pasta IMAGE echo` alone, to its line: %s", fmtMs(median(alone)))
	if len(starts) == scaleSessions {
		p50, p99 := percentile(starts, 0.5), percentile(starts, 0.99)
		report(figure{part: partOther, what: what + ", median", measured: fmtMs(p50), baseline: baseAlone, ratio: float64(p50) / float64(median(alone)), goal: noGoal})
		report(figure{part: partOther, what: "the same, 99th percentile (the slowest of " + strconv.Itoa(scaleSessions) + ")", measured: fmtMs(p99), baseline: baseAlone,
			ratio: float64(p99) / float64(median(alone)), goal: noGoal})
		b50, b99 := percentile(bareStarts, 0.5), percentile(bareStarts, 0.99)
		report(figure{part: partOther, what: "the same median against as many bare `podman run`s started at once", measured: fmtMs(p50),
			baseline: fmt.Sprintf("%d `podman run --rm --network=pasta IMAGE echo` at once, median: %s", scaleSessions, fmtMs(b50)), ratio: float64(p50) / float64(b50), goal: noGoal})
		report(figure{part: partOther, what: "the same, 99th percentile", measured: fmtMs(p99),
			baseline: fmt.Sprintf("the bare ones' 99th: %s", fmtMs(b99)), ratio: float64(p99) / float64(b99), goal: noGoal})
	} else {
		notMeasured(partOther, what, baseAlone, noGoal, fmt.Sprintf("%d of %d sessions printed their first line", len(starts), scaleSessions))
	}
	report(figure{part: partOther, what: "of those, sessions enforced (a direct connection to " + scaleDirect + " refused, https://allowed.test answered through the gate, in its audit)",
		measured: fmt.Sprintf("%d of %d", min(enforced, audited), scaleSessions), baseline: "—", goal: atLeast(scaleSessions, "all"), value: float64(min(enforced, audited))})
	if mem.gates == scaleSessions {
		report(figure{part: partOther, what: fmt.Sprintf("the %d gates' resident memory while all are up (squid and its helpers, every process of each gate's pid namespace)", scaleSessions),
			measured: fmt.Sprintf("%.0f MB RSS in all (%.1f MB a gate); PSS %.0f MB", mem.rss, mem.rss/scaleSessions, mem.pss), baseline: "—",
			goal: atMost(40, "≤ 40 MB a gate"), value: mem.rss / scaleSessions})
	} else {
		notMeasured(partOther, "the gates' resident memory while all are up", "—", atMost(40, "≤ 40 MB a gate"), fmt.Sprintf("%d gates found running", mem.gates))
	}
	leftText := "nothing"
	if len(left) > 0 {
		leftText = strings.Join(left, "; ")
	}
	report(figure{part: partOther, what: "left once the sessions' watchdogs are done (containers, volumes, netns, pasta, processes, gate ports, live session state)",
		measured: leftText, baseline: "—", goal: atMost(0, "nothing"), value: float64(len(left))})
	note("\nTwenty at once: load average %s at the burst, %s with all up; bare `podman run` alone %s to its line (%s to its exit); the last watchdog done %.1f s after the last session ended; "+
		"beside the gates, the sessions' own processes (aisb, its watchdog, its status reader) %.0f MB RSS (PSS %.0f MB), pasta %.0f MB RSS (PSS %.0f MB), conmon %.0f MB RSS, all %d sessions.\n",
		load, loadUp, fmtMs(median(alone)), fmtMs(median(aloneExit)), finish.Seconds(), mem.aisbRSS, mem.aisbPSS, mem.pastaRSS, mem.pastaPSS, mem.conmonRSS, scaleSessions)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func testUID(b *testing.B) uint32 {
	u, err := osuser.Lookup(testhost.User)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := strconv.Atoi(u.Uid)
	return uint32(n)
}

// scalePhases notes, for each AISB_TRACE line of the sessions, when the
// sessions reached it (from each aisb's own start): the median and the
// slowest of them, so that where twenty at once wait shows.
func scalePhases(runs []*launched) {
	var order []string
	at := map[string][]time.Duration{}
	for _, l := range runs {
		for _, m := range traceLine.FindAllStringSubmatch(l.stder.String(), -1) {
			v, _ := strconv.ParseFloat(m[1], 64)
			if _, ok := at[m[2]]; !ok {
				order = append(order, m[2])
			}
			at[m[2]] = append(at[m[2]], time.Duration(v*float64(time.Millisecond)))
		}
	}
	if len(order) == 0 {
		note("\nTwenty at once: no AISB_TRACE phases were printed.\n")
		return
	}
	note("\n### Twenty at once: when the sessions reached each phase (AISB_TRACE=1, ms from each aisb's start)\n\n| phase (the trace's line) | median | slowest | sessions |\n|---|---|---|---|\n")
	for _, name := range order {
		note("| %s | %.0f | %.0f | %d |\n", name, ms(median(at[name])), ms(slices.Max(at[name])), len(at[name]))
	}
}
