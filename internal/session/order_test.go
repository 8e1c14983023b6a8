// The session's order against the fakes, in one file of about 520 lines:
// every case shares the fake engine, the fake gate and the order they
// record, local and remote alike.

package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/engine/enginefake"
	"github.com/aisb-dev/aisb/internal/live"
	"github.com/aisb-dev/aisb/internal/progs"
	"github.com/aisb-dev/aisb/internal/state"
)

// The session's order, against a fake Podman (enginefake) and a fake gate:
// what a session does when things go right and when they go wrong, in
// milliseconds. The real gate's part of it is the integration tests'.

// fakePodman is the fake service as a session's connection.
type fakePodman struct {
	remote bool // the fake plays an engine that is not local
	// sees is the directory the engine's containers see at the project's
	// path (the path check's container copies its marker to its reply
	// there, as its sh would); "": none, the check's container does
	// nothing.
	sees string
	// onCheck is told the check's marker name before its container runs.
	onCheck func(marker string)
	specs   sync.Map // name -> the *specgen.SpecGenerator it was created with
	*enginefake.Fake
	closed bool
}

func (p *fakePodman) ContainerCreate(ctx context.Context, s *specgen.SpecGenerator) (types.ContainerCreateResponse, error) {
	p.specs.Store(s.Name, s)
	return p.Fake.ContainerCreate(ctx, s)
}

func (p *fakePodman) ContainerStart(ctx context.Context, name string) error {
	if c, ok := p.Container(name); ok && c.Labels[engine.LabelKind] == "pathcheck" && p.sees != "" {
		marker := filepath.Join(p.sees, filepath.Base(c.Spec.Entrypoint[4]))
		if p.onCheck != nil {
			p.onCheck(filepath.Base(marker))
		}
		if b, err := os.ReadFile(marker); err == nil {
			os.WriteFile(marker+".reply", b, 0o644)
		}
	}
	return p.Fake.ContainerStart(ctx, name)
}

func (p *fakePodman) How() string { return "the fake" }
func (p *fakePodman) Locality() engine.Locality {
	return engine.Locality{Local: !p.remote, Why: "the fake"}
}
func (p *fakePodman) Address() string { return "fake://" }
func (p *fakePodman) Close() error    { p.closed = true; return nil }
func (p *fakePodman) Reconnect(context.Context, engine.Where, time.Duration) error {
	return errors.New("the fake does not come back")
}

// events is the order of what the fake gate and the test saw.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, s)
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// fakeGate stands for the session's gate: it records its finish and its
// removal, with what was still there at each.
type fakeGate struct {
	r       *run
	f       *enginefake.Fake
	ev      *events
	lose    error         // reported by watchAlive once the gate is ready
	lost    chan struct{} // closed once lose was reported
	handOff bool          // finish hands the gate to the watchdog
}

func (g *fakeGate) port() int      { return 4242 }
func (g *fakeGate) caCert() []byte { return nil }
func (g *fakeGate) proxyURL(host string) string {
	return "http://aisb:" + strings.Repeat("0", 32) + "@" + host + ":4242"
}
func (g *fakeGate) ready() error { g.ev.add("gate ready"); return nil }
func (g *fakeGate) watchAlive(ctx context.Context, lost func(error)) {
	if g.lose != nil {
		lost(g.lose)
		close(g.lost)
	}
	<-ctx.Done()
}

func (g *fakeGate) finish(func(string)) (bool, error) {
	_, running := g.f.Container(sandboxName(g.r.id))
	c, _ := g.f.Container(sandboxName(g.r.id))
	g.ev.add("audit complete; sandbox running: " + boolWord(running && c.State == "running") + "; secrets: " + g.secrets())
	if g.handOff {
		if err := g.r.wd.Finish(); err != nil {
			return false, err
		}
		g.ev.add("handed to the watchdog")
		return true, nil
	}
	return false, nil
}

func (g *fakeGate) remove(func(string)) error {
	g.ev.add("gate removed; secrets: " + g.secrets())
	return nil
}

// secrets says whether the gate's secrets are still in its directory.
func (g *fakeGate) secrets() string {
	for _, p := range gate.SecretPaths(gateDir(g.r.dir)) {
		if _, err := os.Lstat(p); err == nil {
			return "there"
		}
	}
	return "gone"
}

func boolWord(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func sandboxName(id string) string { return "aisb-" + id }

// orderCase is one session against the fakes.
type orderCase struct {
	f       *enginefake.Fake
	p       *fakePodman
	g       *fakeGate
	ev      *events
	o       Options
	stderr  *bytes.Buffer
	watched string // the watchdog's standard input, once it has exited
}

func newOrderCase(t *testing.T, watchdog bool) *orderCase {
	t.Helper()
	f := enginefake.New()
	f.Version = engine.MinEmptyDetachKeys
	f.Files(enginefake.Kind("sandbox"), map[string][]byte{contract.StatusPath: []byte(`{"outcome":"enforced"}`)})
	f.ExitOnStart(enginefake.Kind("pathcheck"), 0)
	oc := &orderCase{f: f, p: &fakePodman{Fake: f}, ev: &events{}, stderr: &bytes.Buffer{}}
	// The programs' place holders pass progs.Check: a static ELF's header
	// for this machine (the fake Podman runs nothing).
	bin := t.TempDir()
	elfHeader, herr := progs.Header(runtime.GOARCH, false)
	if herr != nil {
		t.Fatal(herr)
	}
	for _, b := range []string{"aisb-entrypoint", "aisb-gatehelper"} {
		if err := os.WriteFile(filepath.Join(bin, b), elfHeader, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Sandbox.Harness, cfg.Sandbox.State = "shell", config.StateNone
	list, err := allowlist.Parse([]string{"allowed.test"})
	if err != nil {
		t.Fatal(err)
	}
	var logMu sync.Mutex
	oc.o = Options{
		Config: &config.Resolved{Config: cfg, Allowlist: list},
		Paths:  state.Paths{State: t.TempDir(), Runtime: t.TempDir(), Config: t.TempDir()},
		// Not t.TempDir: the project must not be a parent of the state.
		ProjectDir: t.TempDir(), Command: []string{"true"}, Helper: "pasta",
		Entrypoint: filepath.Join(bin, "aisb-entrypoint"), GateHelper: filepath.Join(bin, "aisb-gatehelper"),
		Logf: func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			oc.stderr.WriteString(strings.TrimSpace(fmt.Sprintf(format, args...)) + "\n")
		},
		Stdin: bytes.NewReader(nil), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{},
	}
	if watchdog {
		out := filepath.Join(t.TempDir(), "watchdog")
		oc.o.Watchdog = []string{"/bin/sh", "-c", "cat > " + out, "sh"}
		t.Cleanup(func() {})
		oc.watched = out
	}
	oc.o.seams = &seams{
		connect: func(context.Context, engine.Where) (podman, error) { return oc.p, nil },
		openGate: func(r *run, _ context.Context) (gater, error) {
			// The gate's directory holds secrets, as a real gate's does.
			dir := gateDir(r.dir)
			if err := os.MkdirAll(filepath.Join(dir, "tls"), 0o700); err != nil {
				return nil, err
			}
			for _, p := range []string{filepath.Join(dir, "squid.conf"), filepath.Join(dir, "tls", "ca.key")} {
				if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
					return nil, err
				}
			}
			oc.g.r = r
			oc.ev.add("gate opened")
			return oc.g, nil
		},
	}
	oc.g = &fakeGate{f: f, ev: oc.ev}
	return oc
}

// run runs the session and checks what every session's end must leave:
// nothing listed as running, the connection closed, no secret left
// unless the watchdog has them.
func (oc *orderCase) run(t *testing.T) (int, error, *run) {
	t.Helper()
	var seen *run
	orig := oc.o.seams.openGate
	oc.o.seams.openGate = func(r *run, ctx context.Context) (gater, error) { seen = r; return orig(r, ctx) }
	code, err := Run(context.Background(), oc.o)
	if seen == nil {
		t.Fatalf("the session opened no gate: %v\n%s", err, oc.stderr)
	}
	if entries, lerr := live.Sessions(oc.o.Paths.RunningDir()); lerr != nil || len(entries) != 0 {
		t.Errorf("still listed as running: %v %v", entries, lerr)
	}
	if !oc.p.closed {
		t.Error("the connection to Podman was not closed")
	}
	return code, err, seen
}

// wantOrder checks the teardown's steps and the gate's events.
func wantOrder(t *testing.T, r *run, ev *events, steps, gateEvents []string) {
	t.Helper()
	if !slices.Equal(r.steps, steps) {
		t.Errorf("teardown steps %q, want %q", r.steps, steps)
	}
	if got := ev.all(); !slices.Equal(got, gateEvents) {
		t.Errorf("gate events %q, want %q", got, gateEvents)
	}
}

// The order a session without a watchdog ends in: the sandbox removed,
// the audit complete (secrets still there), the secrets removed, then the
// gate's container.
var (
	endSteps  = []string{"sandbox", "state", "network", "steering", "secrets", "gate", "podman"}
	endEvents = []string{"gate opened", "gate ready", "audit complete; sandbox running: no; secrets: there", "gate removed; secrets: gone"}
)

func sandboxGone(t *testing.T, f *enginefake.Fake, id string) {
	t.Helper()
	if _, ok := f.Container(sandboxName(id)); ok {
		t.Errorf("the sandbox container %s is left", sandboxName(id))
	}
}

// TestSessionOrder: a session that goes right, in its order, and its
// teardown: sandbox removed → audit complete → secrets removed → gate
// removed.
func TestSessionOrder(t *testing.T) {
	oc := newOrderCase(t, false)
	oc.f.ExitOnStart(enginefake.Kind("sandbox"), 0)
	code, err, r := oc.run(t)
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, oc.stderr)
	}
	wantOrder(t, r, oc.ev, endSteps, endEvents)
	sandboxGone(t, oc.f, r.id)
	// Podman's part: the sandbox created once the gate was, started, waited
	// for, its status read, removed.
	var calls []string
	for _, l := range oc.f.Log() {
		if strings.Contains(l, " sandbox ") && !strings.HasPrefix(l, "ContainerInspect") {
			calls = append(calls, strings.Fields(l)[0])
		}
	}
	want := []string{"ContainerCreate", "ContainerAttach", "ContainerStart", "ContainerWait", "ContainerCopyOut", "ContainerRemove"}
	if !slices.Equal(calls, want) {
		t.Errorf("the sandbox's calls %q, want %q", calls, want)
	}
}

// TestSessionGateLostMidSession: the gate dies under the running agent:
// the user hears at once, the session ends in error, and the teardown is
// the same.
func TestSessionGateLostMidSession(t *testing.T) {
	oc := newOrderCase(t, false)
	oc.g.lose, oc.g.lost = gate.ErrLost, make(chan struct{})
	// The agent exits once the gate's death was reported.
	go func() {
		<-oc.g.lost
		oc.f.Exit(sandboxName(oc.g.r.id), 0)
	}()
	code, err, r := oc.run(t)
	if err == nil || !errors.Is(err, gate.ErrLost) || code != 0 {
		t.Fatalf("exit %d, %v; want the lost gate's error with the command's status", code, err)
	}
	if !strings.Contains(oc.stderr.String(), "the sandbox can no longer reach the network") {
		t.Errorf("the user was not told at once:\n%s", oc.stderr)
	}
	wantOrder(t, r, oc.ev, endSteps, endEvents)
}

// TestSessionPodmanLost: Podman dies while the sandbox runs: the session
// says so, waits for it (the fake never comes back) and still ends in
// order; what it could not remove is the next aisb's to sweep.
func TestSessionPodmanLost(t *testing.T) {
	oc := newOrderCase(t, false)
	go func() {
		for !slices.ContainsFunc(oc.f.Log(), func(s string) bool { return strings.HasPrefix(s, "ContainerStart sandbox") }) {
			time.Sleep(time.Millisecond)
		}
		oc.f.LoseService()
	}()
	_, err, r := oc.run(t)
	if err == nil || !strings.Contains(err.Error(), "lost the Podman service") {
		t.Fatalf("got %v, want the lost service said\n%s", err, oc.stderr)
	}
	if !strings.Contains(oc.stderr.String(), "lost the Podman service at fake://") {
		t.Errorf("the user was not told:\n%s", oc.stderr)
	}
	// Without Podman the sandbox cannot be removed (the next aisb's sweep
	// does): the rest of the order holds.
	wantOrder(t, r, oc.ev, endSteps, []string{"gate opened", "gate ready", "audit complete; sandbox running: yes; secrets: there", "gate removed; secrets: gone"})
}

// TestSessionSIGTERM: SIGTERM to aisb goes to the agent, whose exit ends
// the session the normal way.
func TestSessionSIGTERM(t *testing.T) {
	oc := newOrderCase(t, false)
	// The test's own hold on SIGTERM: the process never dies of it, even
	// if it came before the sandbox's forwarding began.
	held := make(chan os.Signal, 1)
	signal.Notify(held, syscall.SIGTERM)
	defer signal.Stop(held)
	go func() {
		for !slices.ContainsFunc(oc.f.Log(), func(s string) bool { return strings.HasPrefix(s, "ContainerStart sandbox") }) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // the forwarding begins once the start returned
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}()
	code, err, r := oc.run(t)
	if err != nil || code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, %v; want %d", code, err, 128+int(syscall.SIGTERM))
	}
	if !slices.ContainsFunc(oc.f.Log(), func(s string) bool { return strings.HasPrefix(s, "ContainerKill sandbox "+sandboxName(r.id)+" 15") }) {
		t.Errorf("SIGTERM was not forwarded to the sandbox: %q", oc.f.Log())
	}
	wantOrder(t, r, oc.ev, endSteps, endEvents)
}

// TestSessionHandOver: with a watchdog, the gate (its audit's end, its
// secrets, its removal) and the exited sandbox are handed over: aisb
// removes neither, and the watchdog hears "finish".
func TestSessionHandOver(t *testing.T) {
	oc := newOrderCase(t, true)
	oc.f.ExitOnStart(enginefake.Kind("sandbox"), 0)
	oc.g.handOff = true
	code, err, r := oc.run(t)
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, oc.stderr)
	}
	wantOrder(t, r, oc.ev, []string{"sandbox", "state", "network", "steering", "watchdog", "podman"},
		[]string{"gate opened", "gate ready", "audit complete; sandbox running: no; secrets: there", "handed to the watchdog"})
	if oc.g.secrets() != "there" {
		t.Error("aisb removed the secrets of a gate it handed to the watchdog")
	}
	if _, ok := oc.f.Container(sandboxName(r.id)); !ok {
		t.Error("aisb removed the exited sandbox it leaves to the watchdog")
	}
	var said []byte
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if said, _ = os.ReadFile(oc.watched); len(said) > 0 {
			break
		}
	}
	if string(said) != "finish\n" {
		t.Errorf("the watchdog heard %q, want finish", said)
	}
}

// TestSessionStatusUnread: the sandbox exits but its entrypoint's status
// cannot be read: the exit status is the container's, the user hears that
// the entrypoint left no account, and the session ends in order.
func TestSessionStatusUnread(t *testing.T) {
	oc := newOrderCase(t, false)
	oc.f.Fail(enginefake.ContainerCopyOut, enginefake.Kind("sandbox"), errors.New("no such file"))
	oc.f.ExitOnStart(enginefake.Kind("sandbox"), 3)
	code, err, r := oc.run(t)
	if err != nil || code != 3 {
		t.Fatalf("exit %d, %v; want 3", code, err)
	}
	if !strings.Contains(oc.stderr.String(), "the sandbox's entrypoint left no account of itself") {
		t.Errorf("the user was not told the status was unread:\n%s", oc.stderr)
	}
	wantOrder(t, r, oc.ev, endSteps, endEvents)
}

// TestSessionRemote: on an engine that is not local the session copies
// the policy and the project in (no bind mount), tells the entrypoint by a
// copy too, says on stderr that it is a review session of a copy, reads
// the copy back for the review once the sandbox has exited, and removes
// the project's volume once the sandbox is gone, before the gate's audit
// ends; the rest of the teardown keeps its order, and no sweep runs.
func TestSessionRemote(t *testing.T) {
	oc := newOrderCase(t, false)
	oc.p.remote = true
	oc.f.ExitOnStart(enginefake.Kind("sandbox"), 0)
	code, err, r := oc.run(t)
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, oc.stderr)
	}
	steps := []string{"sandbox", "state", "path check", "project", "network", "review", "steering", "secrets", "gate", "podman"}
	wantOrder(t, r, oc.ev, steps, endEvents)
	sandboxGone(t, oc.f, r.id)
	// The gate's end began once the sandbox had exited, beside the copies
	// of its status and the project (network.finishEarly), not in the
	// teardown after its removal.
	if r.net == nil || r.net.early == nil {
		t.Error("the remote gate's end did not begin at the sandbox's exit")
	}
	if ok, _ := oc.f.VolumeExists(context.Background(), ProjectVolume(r.id)); ok {
		t.Errorf("the project's volume %s is left", ProjectVolume(r.id))
	}
	if !strings.Contains(oc.stderr.String(), "podman is not local and the project is not shared with it (a container there read a token at that path but what it wrote there did not appear here: it is another directory of that name): this is a review session; the project is copied to volume "+ProjectVolume(r.id)) {
		t.Errorf("stderr does not say the project is a copy:\n%s", oc.stderr)
	}
	var calls []string
	for _, l := range oc.f.Log() {
		if strings.Contains(l, " sandbox ") && !strings.HasPrefix(l, "ContainerInspect") {
			calls = append(calls, strings.Join(strings.Fields(l)[:1], " ")+" "+strings.Join(strings.Fields(l)[3:], " "))
		}
		if strings.HasPrefix(l, "ContainerList") {
			t.Errorf("a sweep ran on an engine that is not local: %s", l)
		}
	}
	want := []string{"ContainerCreate ", "ContainerCopyIn /", "ContainerCopyIn /project", "ContainerAttach ", "ContainerStart ",
		// The second wait: for Podman's cleanup (the sandbox's network
		// gone) before the gate's end begins.
		"ContainerCopyIn /", "ContainerWait ", "ContainerWait ", "ContainerCopyOut " + contract.StatusPath, "ContainerCopyOut /project", "ContainerRemove "}
	if !slices.Equal(calls, want) {
		t.Errorf("the sandbox's calls %q, want %q", calls, want)
	}
}

// TestSessionRemoteRefusals: what needs this host's files or sockets seen
// from the engine is refused on one that is not local, before anything is
// created there (--review is not: every session there is one, and --gate
// is not: a long-lived gate runs there too, gate/longremote.go).
func TestSessionRemoteRefusals(t *testing.T) {
	for name, set := range map[string]func(o *Options){
		"a worktree's .git": func(o *Options) {
			// A real git worktree: its .git is a file naming a git
			// directory outside the project.
			root := t.TempDir()
			for _, args := range [][]string{{"init", "-q", "main"}, {"-C", "main", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x"},
				{"-C", "main", "worktree", "add", "-q", "../wt"}} {
				cmd := exec.Command("git", args...)
				cmd.Dir = root
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("git %v: %v: %s", args, err, out)
				}
			}
			o.ProjectDir = filepath.Join(root, "wt")
		},
	} {
		t.Run(name, func(t *testing.T) {
			oc := newOrderCase(t, false)
			oc.p.remote = true
			set(&oc.o)
			_, err := Run(context.Background(), oc.o)
			if !errors.Is(err, ErrRemoteUnsupported) {
				t.Fatalf("run: %v, want ErrRemoteUnsupported", err)
			}
			if names := oc.f.ContainerNames(); len(names) != 0 {
				t.Errorf("created %q", names)
			}
			if vols, _ := oc.f.VolumeList(context.Background(), nil); len(vols) != 0 {
				t.Errorf("created volumes %v", vols)
			}
		})
	}
}

// TestSessionRemoteGateLost: a remote gate that dies under the running
// agent stops the sandbox (aisb cannot hold its port on that host), and
// the session ends in the lost gate's error, its teardown in order.
func TestSessionRemoteGateLost(t *testing.T) {
	oc := newOrderCase(t, false)
	oc.p.remote = true
	oc.g.lose, oc.g.lost = gate.ErrLost, make(chan struct{})
	_, err, r := oc.run(t)
	if !errors.Is(err, gate.ErrLost) {
		t.Fatalf("run: %v; want the lost gate's error", err)
	}
	if !strings.Contains(oc.stderr.String(), "so it stops the sandbox") {
		t.Errorf("the user was not told:\n%s", oc.stderr)
	}
	if !slices.ContainsFunc(oc.f.Log(), func(s string) bool { return strings.HasPrefix(s, "ContainerKill sandbox") }) {
		t.Errorf("the sandbox was not killed: %q", oc.f.Log())
	}
	wantOrder(t, r, oc.ev, []string{"sandbox", "state", "path check", "project", "network", "review", "steering", "secrets", "gate", "podman"}, endEvents)
}

// TestSessionRemoteAsk: ask mode is not refused on an engine that is not
// local; the session's live server runs, with no helper directory (the
// gate's questions come through the API, gate.Remote.Ask), and the
// session ends as any other.
func TestSessionRemoteAsk(t *testing.T) {
	oc := newOrderCase(t, false)
	oc.p.remote = true
	oc.o.Config.Config.Network.Ask = true
	oc.f.ExitOnStart(enginefake.Kind("sandbox"), 0)
	orig := oc.o.seams.openGate
	checked := false
	oc.o.seams.openGate = func(r *run, ctx context.Context) (gater, error) {
		checked = true
		if r.st.server == nil {
			t.Error("no live server for the remote session's gate to ask")
		}
		if r.st.helperDir != "" {
			t.Errorf("a helper directory %s for a gate that cannot mount it", r.st.helperDir)
		}
		if _, err := os.Lstat(helperDir(r.dir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the helper directory was made: %v", err)
		}
		return orig(r, ctx)
	}
	code, err, _ := oc.run(t)
	if err != nil || code != 0 || !checked {
		t.Fatalf("exit %d, %v (gate opened: %v)\n%s", code, err, checked, oc.stderr)
	}
}
