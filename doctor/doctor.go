// Package doctor measures this host's isolation live, the way the test suite
// does, so a user can re-check aisb's model on a new machine before trusting it.
package doctor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/bindings/system"

	"github.com/aisb-dev/aisb/engine"
	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/harness"
	"github.com/aisb-dev/aisb/image"
	"github.com/aisb-dev/aisb/policy"
	"github.com/aisb-dev/aisb/ruleset"
	"github.com/aisb-dev/aisb/sandbox"
	"github.com/aisb-dev/aisb/session"
	"github.com/aisb-dev/aisb/state"
)

// Statuses.
const (
	Pass = "PASS"
	Warn = "WARN"
	Fail = "FAIL"
)

// Check is one finding.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// Options for a doctor run.
type Options struct {
	BaseImage  string
	Helper     string // "" to detect, as aisb run does
	Entrypoint string // the aisb-entrypoint binary
}

// Report collects checks in order.
type Report struct{ Checks []Check }

func (r *Report) add(name, status, format string, args ...any) {
	r.Checks = append(r.Checks, Check{name, status, fmt.Sprintf(format, args...)})
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool {
	return slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Status == Fail })
}

// Run performs every check it can; a failure early (no Podman) ends it.
func Run(ctx context.Context, o Options) *Report {
	r := &Report{}
	c, err := engine.Connect(ctx)
	if err != nil {
		r.add("podman", Fail, "%v", err)
		return r
	}
	defer c.Close()
	how := "the user's service"
	if c.Private() {
		how = "a private service aisb started"
	}
	r.add("podman", Pass, "Podman %s through its API (%s)", c.Version, how)
	session.Reap(c, os.Stderr)

	info, err := system.Info(c.Ctx, nil)
	if err != nil {
		r.add("podman info", Fail, "%v", err)
		return r
	}
	helper, err := session.DetectHelper(c, o.Helper)
	switch {
	case err != nil:
		r.add("network helper", Fail, "%v", err)
	case helper == sandbox.Pasta:
		r.add("network helper", Pass, "pasta (%s): the host's loopback mapped at %s", info.Host.Pasta.Executable, sandbox.MappedHost(helper))
	default:
		r.add("network helper", Warn, "slirp4netns (pasta unavailable): works, gate at %s; install passt for pasta", sandbox.MappedHost(helper))
	}
	rootless(r, info)
	if err != nil {
		return r
	}
	squidParses(r, c, o)
	sandboxChecks(ctx, r, c, o, helper)
	return r
}

func rootless(r *Report, info *define.Info) {
	u, err := user.Current()
	if err == nil {
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			if n := subordinate(f, u); n >= 65536 {
				r.add("subordinate ids", Pass, "%s: %d ids for %s", f, n, u.Username)
			} else {
				r.add("subordinate ids", Fail, "%s: %d ids for %s; add a range of 65536 (usermod --add-subuids/--add-subgids)", f, n, u.Username)
			}
		}
	}
	rd := os.Getenv("XDG_RUNTIME_DIR")
	if fi, err := os.Stat(rd); rd == "" || err != nil || !fi.IsDir() {
		r.add("runtime dir", Warn, "XDG_RUNTIME_DIR %q is not a directory; rootless Podman needs one (usually /run/user/UID)", rd)
	} else {
		r.add("runtime dir", Pass, "%s", rd)
	}
	if d := info.Store.GraphDriverName; d == "overlay" {
		r.add("storage driver", Pass, "overlay")
	} else {
		r.add("storage driver", Warn, "%s: slow and large; set driver = \"overlay\" in ~/.config/containers/storage.conf", d)
	}
	v2 := info.Host.CgroupsVersion == "v2"
	if v2 && slices.Contains(info.Host.CgroupControllers, "memory") && slices.Contains(info.Host.CgroupControllers, "pids") {
		r.add("resource limits", Pass, "cgroup v2 with memory and pids controllers: --pids, --memory, --cpus are enforced")
	} else {
		r.add("resource limits", Warn, "cgroup %s rootless: Podman would ignore --pids, --memory and --cpus, so aisb refuses them unless --rlimit-fallback (nproc, data, cpu seconds)", info.Host.CgroupsVersion)
	}
}

// subordinate counts the ids f grants to u (by name or uid).
func subordinate(f string, u *user.User) int {
	file, err := os.Open(f)
	if err != nil {
		return 0
	}
	defer file.Close()
	n := 0
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		p := strings.Split(sc.Text(), ":")
		if len(p) == 3 && (p[0] == u.Username || p[0] == u.Uid) {
			c, _ := strconv.Atoi(p[2])
			n += c
		}
	}
	return n
}

func squidParses(r *Report, c *engine.Conn, o Options) {
	img, _, err := image.Ensure(c, gate.ImageSpec(o.BaseImage), os.Stderr)
	if err != nil {
		r.add("gate config", Fail, "gate image: %v", err)
		return
	}
	dir, err := os.MkdirTemp("", "aisb-doctor-")
	if err != nil {
		r.add("gate config", Fail, "%v", err)
		return
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777) // squid -k parse runs as the image's proxy user
	hosts, _ := policy.ParseAllowlist([]string{"api.example.com", ".example.org", "192.0.2.7"})
	addrs, _ := gate.HostAddrs()
	conf, err := gate.Render(gate.Config{Session: "doctor", Port: 3128, Dir: "/gate", Allowlist: hosts, HostAddrs: addrs})
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "squid.conf"), []byte(conf), 0o644)
	}
	if err != nil {
		r.add("gate config", Fail, "%v", err)
		return
	}
	code, err := engine.RunOnce(c, img, dir, "/gate", []string{"sh", "-c", "squid -k parse -f /gate/squid.conf > /gate/parse.log 2>&1"})
	out, _ := os.ReadFile(filepath.Join(dir, "parse.log"))
	if err != nil || code != 0 {
		r.add("gate config", Fail, "squid -k parse: exit %d %v: %s", code, err, lastLines(out))
		return
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "HTTP requires the use of Via") {
			continue
		}
		for _, bad := range []string{"ERROR", "FATAL", "WARNING", "NOTICE", "UPGRADE", "UNRECOGNIZED"} {
			if strings.Contains(l, bad) {
				r.add("gate config", Fail, "squid -k parse: %s", strings.TrimSpace(l))
				return
			}
		}
	}
	r.add("gate config", Pass, "a generated squid.conf parses cleanly in the gate image")
}

func lastLines(b []byte) string {
	l := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(l) > 3 {
		l = l[len(l)-3:]
	}
	return strings.Join(l, "; ")
}

// probeScript tries each way out with the image's own tools and prints
// NAME=ok or NAME=blocked.
func probeScript(mapped string, gatePort, otherPort, udpPort int) string {
	return fmt.Sprintf(`
try() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n=ok"; else echo "$n=blocked"; fi; }
try gate timeout 5 bash -c 'exec 3<>/dev/tcp/%[1]s/%[2]d'
try other timeout 5 bash -c 'exec 3<>/dev/tcp/%[1]s/%[3]d'
try udp timeout 5 python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.sendto(b"q", ("%[1]s", %[4]d)); s.recv(64)'
try raw python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'
`, mapped, gatePort, otherPort, udpPort)
}

func sandboxChecks(ctx context.Context, r *Report, c *engine.Conn, o Options, helper string) {
	shell, _ := harness.Lookup("shell")
	epBytes, err := os.ReadFile(o.Entrypoint)
	if err != nil {
		r.add("sandbox image", Fail, "read aisb-entrypoint: %v", err)
		return
	}
	img, _, err := image.Ensure(c, session.ImageSpec(o.BaseImage, shell, epBytes), os.Stderr)
	if err != nil {
		r.add("sandbox image", Fail, "%v", err)
		return
	}
	targets, err := newTargets()
	if err != nil {
		r.add("targets", Fail, "listen on loopback: %v", err)
		return
	}
	defer targets.close()
	mapped := sandbox.MappedHost(helper)
	script := probeScript(mapped, targets.gate, targets.other, targets.udp)
	dir, err := os.MkdirTemp("", "aisb-doctor-")
	if err != nil {
		r.add("sandbox", Fail, "%v", err)
		return
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	p := ruleset.Policy{Version: 1, Mode: ruleset.ModeAllow, Gate: &ruleset.Endpoint{Addr: netip.MustParseAddr(mapped), Port: uint16(targets.gate)}}
	b, _ := json.Marshal(p)
	policyFile := filepath.Join(dir, "policy.json")
	os.WriteFile(policyFile, b, 0o644)
	os.WriteFile(filepath.Join(dir, "probe.sh"), []byte(script+
		"aisb-entrypoint -- true >/dev/null 2>&1; echo reinstall=$?\ngrep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status\n"), 0o644)

	// The control: the same probes from a plain container on the same
	// helper, as root with NET_RAW, reach every target.
	ctl, err := runScript(c, img, helper, dir, policyFile, true, nil)
	if err != nil {
		r.add("control", Fail, "%v", err)
		return
	}
	for _, k := range []string{"gate", "other", "udp", "raw"} {
		if ctl[k] != "ok" {
			r.add("control", Fail, "%s is not reachable even without the sandbox (%s), so the checks below would prove nothing", k, ctl[k])
			return
		}
	}
	r.add("control", Pass, "without the sandbox a container reaches the gate, another host-loopback port, UDP and raw sockets")

	got, err := runScript(c, img, helper, dir, policyFile, false, nil)
	if err != nil {
		r.add("sandbox", Fail, "%v", err)
		return
	}
	verdict := func(name, key, want, pass, fail string) {
		if got[key] == want {
			r.add(name, Pass, "%s", pass)
		} else {
			r.add(name, Fail, "%s (%s=%s)", fail, key, got[key])
		}
	}
	verdict("table installed", "exit", "0", "the entrypoint installed and verified the table, then ran the command", "the sandbox did not run")
	verdict("gate reachable", "gate", "ok", fmt.Sprintf("the mapped host loopback (%s) reaches the gate's port", mapped), "the gate's port is not reachable from the sandbox")
	verdict("other host ports", "other", "blocked", "another host-loopback port is dropped", "another host-loopback port is reachable")
	verdict("direct UDP and DNS", "udp", "blocked", "UDP (so DNS) is dropped", "UDP gets out")
	verdict("raw sockets", "raw", "blocked", "raw sockets are refused", "a raw socket opened")
	verdict("agent vs table", "reinstall", "77", "after the drop the agent cannot replace the table (exit 77)", "the agent could reinstall the table")
	if got["CapEff"] == "0000000000000000" && got["CapBnd"] == "0000000000000000" && got["NoNewPrivs"] == "1" {
		r.add("privileges", Pass, "the agent has no capabilities, an empty bounding set and no_new_privs")
	} else {
		r.add("privileges", Fail, "CapEff=%s CapBnd=%s NoNewPrivs=%s", got["CapEff"], got["CapBnd"], got["NoNewPrivs"])
	}

	// Without NET_ADMIN the entrypoint cannot lock the namespace: 77, and
	// the command never runs.
	noAdmin, err := runScript(c, img, helper, dir, policyFile, false, []string{"SETUID", "SETGID", "SETPCAP"})
	switch {
	case err != nil:
		r.add("fails closed", Fail, "%v", err)
	case noAdmin["exit"] == "77" && noAdmin["gate"] == "":
		r.add("fails closed", Pass, "without NET_ADMIN the entrypoint exits 77 and the command does not run")
	default:
		r.add("fails closed", Fail, "without NET_ADMIN: exit %s, command output %v", noAdmin["exit"], noAdmin)
	}
}

// runScript runs probe.sh in the sandbox image, either plainly (control) or
// through the entrypoint with caps (nil: the entrypoint's usual four), and
// parses KEY=VALUE and "Key: value" lines, plus exit.
func runScript(c *engine.Conn, img, helper, dir, policyFile string, plain bool, caps []string) (map[string]string, error) {
	var out, errb bytes.Buffer
	o := sandbox.Options{
		Session: "doctor-" + state.NewSessionID(), Image: img, ProjectDir: dir, Command: []string{"sh", "/project/probe.sh"},
		Mode: ruleset.ModeAllow, Helper: helper, PolicyFile: policyFile, CapAdd: caps, Owner: state.Owner(),
		Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &errb,
	}
	if plain {
		o.Plain = true
		o.CapAdd = []string{"NET_RAW"}
	}
	code, err := sandbox.Run(c, o)
	if err != nil {
		return nil, err
	}
	res := map[string]string{"exit": strconv.Itoa(code)}
	for _, l := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			res[k] = strings.TrimSpace(v)
		} else if k, v, ok := strings.Cut(l, ":"); ok {
			res[k] = strings.TrimSpace(v)
		}
	}
	return res, nil
}

// targets are doctor's own listeners on 127.0.0.1: the stand-in gate,
// another TCP port, and a UDP echo standing in for a resolver.
type targets struct {
	gate, other, udp int
	closers          []func() error
}

func newTargets() (*targets, error) {
	t := &targets{}
	for _, p := range []*int{&t.gate, &t.other} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.close()
			return nil, err
		}
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				conn.Close()
			}
		}()
		*p = ln.Addr().(*net.TCPAddr).Port
		t.closers = append(t.closers, ln.Close)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.close()
		return nil, err
	}
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	t.udp = pc.LocalAddr().(*net.UDPAddr).Port
	t.closers = append(t.closers, pc.Close)
	return t, nil
}

func (t *targets) close() {
	for _, c := range t.closers {
		c()
	}
}
