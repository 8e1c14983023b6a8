// Package session runs one aisb session end to end: the image, the gate, the
// session policy, the sandbox, the live audit, and the cleanup that leaves
// nothing running.
package session

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/system"

	aisb "github.com/aisb-dev/aisb"
	"github.com/aisb-dev/aisb/config"
	"github.com/aisb-dev/aisb/engine"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/harness"
	"github.com/aisb-dev/aisb/image"
	"github.com/aisb-dev/aisb/policy"
	"github.com/aisb-dev/aisb/ruleset"
	"github.com/aisb-dev/aisb/sandbox"
	"github.com/aisb-dev/aisb/state"
)

// DefaultEnv are the only host variables passed without being named.
var DefaultEnv = []string{"TERM", "COLORTERM", "LANG"}

// Options describe one session.
type Options struct {
	Config         *config.Resolved
	ProjectDir     string
	Command        []string // empty: the harness's command
	Helper         string   // pasta, slirp4netns, or "" to detect
	GateName       string   // a long-lived gate to use instead of a session gate
	Unenforced     bool
	RlimitFallback bool
	CPUSeconds     uint64
	Entrypoint     string   // path of the aisb-entrypoint binary
	Watchdog       []string // argv that starts the watchdog; nil: none
	Terminal       bool
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// FindEntrypoint returns the aisb-entrypoint binary: $AISB_ENTRYPOINT, else
// next to the running aisb (where both make and go install put it).
func FindEntrypoint() (string, error) {
	if p := os.Getenv("AISB_ENTRYPOINT"); p != "" {
		return p, checkStatic(p)
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find aisb-entrypoint: %w", err)
	}
	p := filepath.Join(filepath.Dir(self), "aisb-entrypoint")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("find aisb-entrypoint: not next to aisb at %s; build both with make, or go install ./cmd/... (or set AISB_ENTRYPOINT)", p)
	}
	return p, checkStatic(p)
}

func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("aisb-entrypoint at %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("aisb-entrypoint at %s is dynamically linked; build it with CGO_ENABLED=0", p)
		}
	}
	return nil
}

// DetectHelper picks the rootless network helper the service can use:
// pasta where it exists and the service is new enough, else slirp4netns.
func DetectHelper(c *engine.Conn, want string) (string, error) {
	info, err := system.Info(c.Ctx, nil)
	if err != nil {
		return "", fmt.Errorf("podman info: %w", err)
	}
	hasPasta := info.Host.Pasta.Executable != "" && c.RequirePasta() == nil
	hasSlirp := info.Host.Slirp4NetNS.Executable != ""
	switch want {
	case sandbox.Pasta:
		if !hasPasta {
			if err := c.RequirePasta(); err != nil {
				return "", err
			}
			return "", errors.New("pasta is not installed where podman runs; install passt or use --network-helper slirp4netns")
		}
		return want, nil
	case sandbox.Slirp4netns:
		if !hasSlirp {
			return "", errors.New("slirp4netns is not installed where podman runs")
		}
		return want, nil
	case "":
		if hasPasta {
			return sandbox.Pasta, nil
		}
		if hasSlirp {
			return sandbox.Slirp4netns, nil
		}
		return "", errors.New("neither pasta nor slirp4netns is installed where podman runs; install passt")
	default:
		return "", fmt.Errorf("network helper %q: want pasta or slirp4netns", want)
	}
}

// helperDirs are where Podman looks for its helper binaries (besides PATH).
var helperDirs = []string{"/usr/local/libexec/podman", "/usr/local/lib/podman", "/usr/libexec/podman", "/usr/lib/podman"}

// quickHelper is DetectHelper without `podman info` (a third of a second):
// the service runs on this host (the gate must share its loopback), so where
// pasta is installed here and the service is new enough, pasta it is. Any
// other case asks the service.
func quickHelper(c *engine.Conn, want string) (string, error) {
	if want == "" && c.RequirePasta() == nil {
		if _, err := exec.LookPath("pasta"); err == nil {
			return sandbox.Pasta, nil
		}
		for _, d := range helperDirs {
			if _, err := os.Stat(filepath.Join(d, "pasta")); err == nil {
				return sandbox.Pasta, nil
			}
		}
	}
	return DetectHelper(c, want)
}

// ImageSpec is the sandbox image for a harness on a base.
func ImageSpec(base string, h harness.Preset, entrypointBinary []byte) image.Spec {
	return image.Spec{
		Name:          "aisb-sandbox-" + h.Name,
		Containerfile: aisb.Containerfile,
		Files:         map[string][]byte{"aisb-entrypoint": entrypointBinary},
		BaseImage:     base,
		Args:          map[string]string{"HARNESS_NPM": h.NPM},
	}
}

// tracer prints phase timings to stderr when AISB_TRACE is set; for
// performance work only.
func tracer(w io.Writer) func(string) {
	if os.Getenv("AISB_TRACE") == "" {
		return func(string) {}
	}
	start := time.Now()
	return func(phase string) {
		fmt.Fprintf(w, "aisb: trace: %6.1f ms %s\n", float64(time.Since(start).Microseconds())/1000, phase)
	}
}

// Run runs the session and returns the command's exit status.
func Run(ctx context.Context, o Options) (int, error) {
	trace := tracer(o.Stderr)
	defer trace("done")
	cfg := o.Config.Config
	h, err := harness.Lookup(cfg.Sandbox.Harness)
	if err != nil {
		return 0, err
	}
	command := o.Command
	if len(command) == 0 {
		command = h.Command
	}
	mode := string(cfg.Network.Mode)
	allowlist := o.Config.Allowlist
	if mode != ruleset.ModeNone && len(h.Hosts) > 0 {
		// A harness cannot work without its API hosts; choosing it allows them.
		allowlist = withHarnessHosts(allowlist, h)
	}
	limits, err := resolveLimits(cfg.Limits, o.RlimitFallback, o.CPUSeconds)
	if err != nil {
		return 0, err
	}
	env, err := buildEnv(cfg.Env)
	if err != nil {
		return 0, err
	}

	c, err := engine.Connect(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	trace("connected")
	Reap(c, o.Stderr)
	trace("reaped")
	helper, err := quickHelper(c, o.Helper)
	if err != nil {
		return 0, err
	}
	trace("network helper")

	epBytes, err := os.ReadFile(o.Entrypoint)
	if err != nil {
		return 0, fmt.Errorf("read aisb-entrypoint: %w", err)
	}
	img, _, err := image.Ensure(c, ImageSpec(cfg.Sandbox.BaseImage, h, epBytes), o.Stderr)
	if err != nil {
		return 0, err
	}
	trace("sandbox image")

	id := state.NewSessionID()
	dir, err := state.SessionDir(id)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("session directory: %w", err)
	}
	owner := state.Owner()
	if o.Watchdog != nil {
		stop := startWatchdog(o.Watchdog, owner, id)
		defer stop()
	}

	mapped := netip.MustParseAddr(sandbox.MappedHost(helper))
	p := ruleset.Policy{Version: ruleset.PolicyVersion, Mode: mode}
	var hostAdd []string
	switch mode {
	case ruleset.ModeAllow:
		// The gate parses untrusted traffic: it gets a directory of its own,
		// never the one holding the sandbox's policy.
		port, stopGate, err := openGate(ctx, c, o, cfg, id, filepath.Join(dir, "gate"), owner, allowlist)
		if err != nil {
			return 0, err
		}
		trace("gate ready")
		defer func() { stopGate(); trace("gate stopped") }()
		p.Gate = &ruleset.Endpoint{Addr: mapped, Port: uint16(port)}
		proxy := fmt.Sprintf("http://%s:%d", mapped, port)
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "npm_config_proxy", "npm_config_https_proxy"} {
			env[k] = proxy
		}
		env["NO_PROXY"], env["no_proxy"] = "localhost,127.0.0.1,::1", "localhost,127.0.0.1,::1"
		env["NODE_USE_ENV_PROXY"] = "1"
	case ruleset.ModeNoGate:
		pins, addrs, nets, err := pin(ctx, resolver(cfg.Network.Resolvers()), allowlist, o.Stderr)
		if err != nil {
			return 0, err
		}
		hostAdd, p.Pinned, p.PinnedNets = pins, addrs, nets
	case ruleset.ModeOpen:
		fmt.Fprintln(o.Stderr, "aisb: WARNING: network mode open: the sandbox can reach anything this host can, unfiltered and unaudited")
	}
	if mode == ruleset.ModeAllow || mode == ruleset.ModeNoGate {
		for _, port := range cfg.Network.HostPorts {
			p.HostPorts = append(p.HostPorts, ruleset.Endpoint{Addr: mapped, Port: uint16(port)})
		}
	}
	if _, err := ruleset.Build(p); err != nil && !errors.Is(err, ruleset.ErrOpen) {
		return 0, fmt.Errorf("session policy: %w", err)
	}
	policyFile := filepath.Join(dir, "policy.json")
	b, _ := json.Marshal(p)
	if err := os.WriteFile(policyFile, b, 0o644); err != nil {
		return 0, fmt.Errorf("session policy: %w", err)
	}
	if o.Unenforced {
		fmt.Fprintln(o.Stderr, "aisb: WARNING: --allow-unenforced: the sandbox runs even if its network table cannot be installed")
	}

	code, err := sandbox.Run(c, sandbox.Options{
		Session: id, Image: img, ProjectDir: o.ProjectDir, Command: command,
		Mode: mode, Helper: helper, PolicyFile: policyFile, Env: env, HostAdd: hostAdd, DNS: dnsIPs(cfg.Network.Resolvers()),
		Terminal: o.Terminal, Unenforced: o.Unenforced,
		PidsLimit: limits.pids, Memory: limits.memory, CPUs: limits.cpus, Rlimits: limits.rlimits,
		Owner: owner, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
	})
	trace("sandbox done")
	if err != nil {
		return 0, err
	}
	switch code {
	case 77:
		fmt.Fprintln(o.Stderr, "aisb: exit 77: the sandbox could not be enforced (network table or privilege drop failed), so the command did not run; `aisb doctor` checks this host")
	case 78:
		fmt.Fprintln(o.Stderr, "aisb: exit 78: the sandbox's session policy was missing or invalid, so the command did not run")
	}
	return code, nil
}

// openGate starts the session's gate (or finds the long-lived one) and
// follows its audit; stop removes it. It is not started concurrently with
// the sandbox's creation: measured here, Podman 5.4 then sometimes fails the
// sandbox's attach ("doesn't map UID 0"), for some 30 ms of gain.
func openGate(ctx context.Context, c *engine.Conn, o Options, cfg config.Config, id, dir, owner string, allowlist []policy.Host) (port int, stop func(), err error) {
	if o.GateName != "" {
		gdir, err := state.GateDir(o.GateName)
		if err != nil {
			return 0, nil, err
		}
		g, err := gate.Find(c, o.GateName, gdir)
		if err != nil {
			return 0, nil, err
		}
		return g.Port, func() {}, nil
	}
	gateImg, _, err := image.Ensure(c, gate.ImageSpec(cfg.Sandbox.BaseImage), o.Stderr)
	if err != nil {
		return 0, nil, err
	}
	g, err := gate.Start(c, gate.Options{Session: id, Dir: dir, Image: gateImg, Allowlist: allowlist, DNS: cfg.Network.Resolvers(), Owner: owner})
	if err != nil {
		return 0, nil, err
	}
	stopFollow, err := FollowAudit(ctx, g)
	if err != nil {
		g.Stop(c)
		return 0, nil, err
	}
	return g.Port, func() { g.Stop(c); stopFollow() }, nil
}

// FollowAudit appends the gate's decisions to $XDG_STATE_HOME/aisb/audit/
// SESSION.jsonl as squid writes them; stop drains and closes it.
func FollowAudit(ctx context.Context, g *gate.Gate) (stop func(), err error) {
	adir, err := state.AuditDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(adir, 0o700); err != nil {
		return nil, fmt.Errorf("audit directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(adir, g.Session+".jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		gate.Follow(fctx, filepath.Join(g.Dir, "access.log"), g.Session, f)
		close(done)
	}()
	return func() { cancel(); <-done; f.Close() }, nil
}

func withHarnessHosts(list []policy.Host, h harness.Preset) []policy.Host {
	out := slices.Clone(list)
	for _, s := range h.Hosts {
		hh, err := policy.ParseHost(s)
		if err != nil {
			continue // presets are ours; a test checks they parse
		}
		if !slices.ContainsFunc(out, func(x policy.Host) bool { return x.Covers(hh) }) {
			out = append(out, hh)
		}
	}
	return out
}

// pin resolves each allowed name once, on the host, for no-gate mode. An
// internal address is never pinned; a name with nothing left is an error.
func pin(ctx context.Context, r *net.Resolver, list []policy.Host, stderr io.Writer) (hostAdd []string, addrs []netip.Addr, nets []netip.Prefix, err error) {
	hostAddrs, err := gate.HostAddrs()
	if err != nil {
		return nil, nil, nil, err
	}
	internal := func(a netip.Addr) bool {
		a = a.Unmap()
		for _, p := range gate.InternalRanges {
			if p.Contains(a) {
				return true
			}
		}
		return slices.Contains(hostAddrs, a)
	}
	add := func(a netip.Addr) {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	for _, h := range list {
		if h.IsNet() {
			for _, p := range gate.InternalRanges {
				if p.Overlaps(h.Net) {
					return nil, nil, nil, fmt.Errorf("no-gate: %s overlaps the internal range %s; it is never admitted", h.Net, p)
				}
			}
			for _, a := range hostAddrs {
				if h.Net.Contains(a) {
					return nil, nil, nil, fmt.Errorf("no-gate: %s holds this host's own address %s; it is never admitted", h.Net, a)
				}
			}
			nets = append(nets, h.Net)
			continue
		}
		if h.IsAddr() {
			if internal(h.Addr) {
				return nil, nil, nil, fmt.Errorf("no-gate: %s is an internal address; it is never admitted", h.Addr)
			}
			add(h.Addr)
			continue
		}
		if h.Domain {
			fmt.Fprintf(stderr, "aisb: no-gate: %s: only the name itself is pinned, not its subdomains\n", h)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ips, err := r.LookupNetIP(rctx, "ip4", h.Name)
		cancel()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("no-gate: resolve %s: %w", h.Name, err)
		}
		kept := 0
		for _, a := range ips {
			a = a.Unmap()
			if internal(a) {
				fmt.Fprintf(stderr, "aisb: no-gate: %s resolves to the internal address %s; not pinned\n", h.Name, a)
				continue
			}
			hostAdd = append(hostAdd, h.Name+":"+a.String())
			add(a)
			kept++
		}
		if kept == 0 {
			return nil, nil, nil, fmt.Errorf("no-gate: %s has no address that may be admitted", h.Name)
		}
	}
	return hostAdd, addrs, nets, nil
}

// resolver is the host's resolver, or network.dns's first reachable one:
// no-gate mode resolves allowed names where the gate would have.
func resolver(servers []netip.Addr) *net.Resolver {
	if len(servers) == 0 {
		return net.DefaultResolver
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		var err error
		for _, s := range servers {
			var c net.Conn
			if c, err = d.DialContext(ctx, network, netip.AddrPortFrom(s, 53).String()); err == nil {
				return c, nil
			}
		}
		return nil, err
	}}
}

func dnsIPs(servers []netip.Addr) []net.IP {
	var ips []net.IP
	for _, a := range servers {
		ips = append(ips, net.IP(a.AsSlice()))
	}
	return ips
}

type limits struct {
	pids, memory int64
	cpus         float64
	rlimits      []sandbox.Rlimit
}

// resolveLimits keeps cgroup limits as asked (Podman's own warning is
// checked at create time), or with the rlimit fallback turns them into
// POSIX rlimits: nproc (per mapped uid), data (per process), cpu seconds.
func resolveLimits(l config.Limits, fallback bool, cpuSeconds uint64) (limits, error) {
	var out limits
	mem := int64(0)
	if l.Memory != "" {
		mem, _ = config.ParseMemory(l.Memory)
	}
	if !fallback {
		if cpuSeconds > 0 {
			return out, errors.New("--cpu-seconds is an rlimit: it needs --rlimit-fallback")
		}
		return limits{pids: int64(l.Pids), memory: mem, cpus: l.CPUs}, nil
	}
	if l.CPUs > 0 {
		return out, errors.New("--cpus cannot be enforced with the rlimit fallback (no rlimit bounds a CPU rate); use --cpu-seconds for a total CPU time")
	}
	if l.Pids > 0 {
		out.rlimits = append(out.rlimits, sandbox.Rlimit{Type: "nproc", Value: uint64(l.Pids)})
	}
	if mem > 0 {
		out.rlimits = append(out.rlimits, sandbox.Rlimit{Type: "data", Value: uint64(mem)})
	}
	if cpuSeconds > 0 {
		out.rlimits = append(out.rlimits, sandbox.Rlimit{Type: "cpu", Value: cpuSeconds})
	}
	return out, nil
}

// buildEnv is the sandbox's whole environment before the proxy variables:
// DefaultEnv when set, env.pass from aisb's own environment (a name that is
// not set is an error, not a silent gap), and env.set.
func buildEnv(e config.Env) (map[string]string, error) {
	env := map[string]string{}
	for _, k := range DefaultEnv {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	for _, k := range e.Pass {
		v, ok := os.LookupEnv(k)
		if !ok {
			return nil, fmt.Errorf("env: %s is to be passed but is not set in your environment; set it or drop --env %s", k, k)
		}
		env[k] = v
	}
	for k, v := range e.Set {
		env[k] = v
	}
	return env, nil
}

// startWatchdog starts a detached process that removes this session's
// containers if this process dies without doing so (SIGKILL, crash).
func startWatchdog(argv []string, owner, session string) (stop func()) {
	cmd := exec.Command(argv[0], append(argv[1:], "--owner", owner, "--session", session)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return func() {}
	}
	go cmd.Wait()
	return func() { cmd.Process.Signal(syscall.SIGTERM) }
}

// Watch is the watchdog's loop: it returns when the owner is gone, and then
// removes every container of the session.
func Watch(ctx context.Context, owner, session string, logw io.Writer) error {
	for state.OwnerAlive(owner) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	c, err := engine.Connect(context.Background())
	if err != nil {
		return err
	}
	defer c.Close()
	engine.Remove(c, sandbox.ContainerName(session))
	return engine.Remove(c, gate.ContainerName(session))
}

// Reap removes containers whose owning aisb process is gone: the path that
// catches what a killed session and its watchdog both left behind.
func Reap(c *engine.Conn, logw io.Writer) {
	list, err := listOwned(c)
	if err != nil {
		fmt.Fprintf(logw, "aisb: reap: %v\n", err)
		return
	}
	for name, owner := range list {
		if !state.OwnerAlive(owner) {
			fmt.Fprintf(logw, "aisb: removing %s, left by a session that ended without cleaning up\n", name)
			engine.Remove(c, name)
		}
	}
}
