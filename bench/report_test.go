package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// A figure is one row of the table `make bench` prints and
// docs/performance.md holds: a measurement, the baseline it is compared with
// in the same run, their ratio, and the verdict against the goal.
type figure struct {
	part     part // where in the table
	what     string
	measured string
	baseline string
	ratio    float64 // measured/baseline; 0: none
	goal     goal
	value    float64 // what the goal is checked against (the ratio, a difference, a value)
	notRun   string  // why it could not be measured; "" when it was
}

// part orders the table: start-up first, whatever order the benchmarks ran in.
type part int

const (
	partStartup part = iota
	partNetwork
	partOther
)

// A goal is a bound on a figure's value.
type goal struct {
	text   string // as the table shows it, e.g. "≤ 1.3"
	limit  float64
	atMost bool // the value must be ≤ limit; else ≥ limit
	bound  bool // false: no goal
}

func atMost(v float64, text string) goal {
	return goal{text: text, limit: v, atMost: true, bound: true}
}
func atLeast(v float64, text string) goal { return goal{text: text, limit: v, bound: true} }

var noGoal = goal{text: "—"}

func (f figure) verdict() string {
	switch {
	case f.notRun != "":
		return "not run: " + f.notRun
	case !f.goal.bound:
		return "—"
	case f.goal.atMost && f.value > f.goal.limit, !f.goal.atMost && f.value < f.goal.limit:
		return "missed"
	}
	return "met"
}

var (
	figuresMu sync.Mutex
	figures   []figure
)

func report(f figure) {
	figuresMu.Lock()
	defer figuresMu.Unlock()
	figures = append(figures, f)
}

// notMeasured records a row that could not be measured, with the reason.
func notMeasured(p part, what, baseline string, g goal, why string) {
	report(figure{part: p, what: what, baseline: baseline, goal: g, notRun: why, measured: "—"})
}

func fmtRatio(r float64) string {
	if r == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", r)
}

// table writes the figures as the Markdown table of docs/performance.md.
func table(w io.Writer) {
	figuresMu.Lock()
	defer figuresMu.Unlock()
	fmt.Fprintln(w, "| what | measured | baseline | ratio | goal | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	slices.SortStableFunc(figures, func(a, b figure) int { return int(a.part) - int(b.part) })
	for _, f := range figures {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", f.what, f.measured, f.baseline, fmtRatio(f.ratio), f.goal.text, f.verdict())
	}
}

// extra holds further tables (the start-up phases), printed after the figures.
var (
	extraMu sync.Mutex
	extra   bytes.Buffer
)

func note(format string, args ...any) {
	extraMu.Lock()
	defer extraMu.Unlock()
	fmt.Fprintf(&extra, format, args...)
}

var startLoad = "?"

// machine describes where the figures were taken, so a figure is never
// read apart from its machine and commit.
func machine() string {
	first := func(argv ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var cmd *exec.Cmd
		if argv[0] == "user" {
			cmd = testhost.UserCommand(ctx, argv[1:]...)
		} else {
			cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Dir = testhost.RepoPath(".")
		}
		out, err := cmd.Output()
		if err != nil {
			return "unknown"
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return strings.TrimSpace(line)
	}
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		fmt.Sscanf(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"), "%d", &kb)
		mem = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
	}
	commit := first("git", "rev-parse", "--short=12", "HEAD")
	if first("git", "status", "--porcelain", "--untracked-files=no") != "unknown" && first("git", "status", "--porcelain", "--untracked-files=no") != "" {
		commit += " (with uncommitted changes)"
	}
	srt := "not installed"
	if _, err := os.Stat(srtBin); err == nil {
		srt = first(srtBin, "--version")
	}
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("load average %s at the start, %s at the end (other work on the machine moves figures; ratios are taken side by side)\n\ncommit %s, %s; %d cores (%s), %s memory; kernel %s; %s; Podman %s, %s; squid %s; srt %s; %s",
		startLoad, strings.Join(strings.Fields(string(load))[:3], " "), commit, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), cpu, mem,
		first("uname", "-r"), first("sh", "-c", ". /etc/os-release; echo \"$PRETTY_NAME (debian_version $(cat /etc/debian_version))\""),
		first("user", "podman", "version", "--format", "{{.Client.Version}}"), "passt "+first("dpkg-query", "-W", "-f", "${Version}", "passt"),
		first("user", "podman", "run", "--rm", "--network=none", "--entrypoint", "sh", testhost.BaseImage, "-c", "squid -v | head -1 | sed 's/.*Version //'"),
		srt, runtime.Version())
}

// TestMain prints, after the benchmarks, every figure with its ratio and
// verdict, and the machine they were taken on.
func TestMain(m *testing.M) {
	start := time.Now()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		startLoad = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	code := m.Run()
	if len(figures) > 0 {
		fmt.Printf("\n## Figures (docs/performance.md), %s in all\n\nMachine: %s\n\n", time.Since(start).Round(time.Second), machine())
		table(os.Stdout)
		extraMu.Lock()
		os.Stdout.Write(extra.Bytes())
		extraMu.Unlock()
	}
	os.Exit(code)
}
