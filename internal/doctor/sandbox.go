package doctor

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/progs"
	"github.com/aisb-dev/aisb/internal/sandbox"
	"github.com/aisb-dev/aisb/internal/state"
)

// probeScript tries each way out with the image's own tools and prints
// NAME=ok or NAME=blocked.
func probeScript(mapped string, gatePort, otherPort, udpPort int) string {
	return fmt.Sprintf(`
try() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n=ok"; else echo "$n=blocked"; fi; }
try gate timeout 5 bash -c 'exec 3<>/dev/tcp/%[1]s/%[2]d'
try other timeout 5 bash -c 'exec 3<>/dev/tcp/%[1]s/%[3]d'
try udp timeout 5 python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.sendto(b"q", ("%[1]s", %[4]d)); s.recv(64)'
try raw python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'
family() { python3 -c "import socket, errno
try:
    socket.socket(socket.$2, socket.$3).close(); print('$1=ok')
except OSError as e:
    print('$1=' + errno.errorcode.get(e.errno, str(e.errno)))"; }
family vsock AF_VSOCK SOCK_STREAM
family packet AF_PACKET SOCK_DGRAM
`, mapped, gatePort, otherPort, udpPort)
}

func sandboxChecks(ctx context.Context, r *Report, c engine.Engine, o Options, helper string, remote bool) {
	shell, _ := harness.Lookup("shell")
	arch, err := c.Arch(ctx)
	if err != nil {
		r.add("sandbox image", Fail, "%v", err)
		return
	}
	path, err := progs.Find(progs.Entrypoint, arch, o.Entrypoint)
	if err != nil {
		r.add("sandbox image", Fail, "%v", err)
		return
	}
	ep, err := image.Digest(path, o.Paths.DigestDir())
	if err != nil {
		r.add("sandbox image", Fail, "read aisb-entrypoint: %v", err)
		return
	}
	img, _, err := image.Ensure(c, sandbox.ImageSpec(o.BaseImage, shell, ep), image.Build{LockDir: o.Paths.LockDir(), Output: o.Builds, Logf: o.Logf})
	if err != nil {
		r.add("sandbox image", Fail, "%v", err)
		return
	}
	var targets *targets
	if remote {
		// The targets are on the engine host's loopback, which the
		// sandbox's mapped loopback reaches there; the project is a
		// volume there, the probe copied into it (remote.go).
		targets, err = remoteTargets(c, img)
		if err == nil {
			var done func()
			if o.projectVolume, done, err = remoteProject(c); err == nil {
				defer done()
			}
		}
	} else {
		targets, err = newTargets()
	}
	if targets != nil {
		defer targets.close()
	}
	if err != nil {
		r.add("targets", Fail, "listen on loopback: %v", err)
		return
	}
	mapped := sandbox.MappedHost(helper)
	script := probeScript(mapped, targets.gate, targets.other, targets.udp)
	dir, err := os.MkdirTemp("", "aisb-doctor-")
	if err != nil {
		r.add("sandbox", Fail, "%v", err)
		return
	}
	defer os.RemoveAll(dir)
	policyDir := filepath.Join(dir, "policy")
	p := contract.Policy{Version: contract.PolicyVersion, Mode: contract.ModeAllow, Gate: &contract.Endpoint{Addr: netip.MustParseAddr(mapped), Port: uint16(targets.gate)}}
	err = os.Chmod(dir, 0o755)
	if err == nil {
		err = sandbox.WritePolicy(policyDir, p)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "probe.sh"), []byte(script+
			"aisb-entrypoint -- true >/dev/null 2>&1; echo reinstall=$?\ngrep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status\n"), 0o644)
	}
	if err == nil {
		// The control runs it as the container's root: readable by all
		// whatever the umask.
		err = os.Chmod(filepath.Join(dir, "probe.sh"), 0o644)
	}
	if err != nil {
		r.add("sandbox", Fail, "prepare the probe: %v", err)
		return
	}

	// The control: the same probes from a plain container on the same
	// helper, as root with NET_RAW, reach every target.
	ctl, err := runScript(c, o, img, helper, dir, policyDir, true, nil)
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

	got, err := runScript(c, o, img, helper, dir, policyDir, false, nil)
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
	families(r, ctl, got)
	if got["CapEff"] == "0000000000000000" && got["CapBnd"] == "0000000000000000" && got["NoNewPrivs"] == "1" {
		r.add("privileges", Pass, "the agent has no capabilities, an empty bounding set and no_new_privs")
	} else {
		r.add("privileges", Fail, "CapEff=%s CapBnd=%s NoNewPrivs=%s", got["CapEff"], got["CapBnd"], got["NoNewPrivs"])
	}

	// Without NET_ADMIN the entrypoint cannot lock the namespace: 77, and
	// the command never runs.
	noAdmin, err := runScript(c, o, img, helper, dir, policyDir, false, []string{"SETUID", "SETGID", "SETPCAP"})
	switch {
	case err != nil:
		r.add("fails closed", Fail, "%v", err)
	case noAdmin["exit"] == "77" && noAdmin["entrypoint"] == "failed 77 install table" && noAdmin["gate"] == "":
		r.add("fails closed", Pass, "without NET_ADMIN the entrypoint exits 77 (its own status: install table failed) and the command does not run")
	default:
		r.add("fails closed", Fail, "without NET_ADMIN: exit %s, command output %v", noAdmin["exit"], noAdmin)
	}
}

// runScript runs probe.sh in the sandbox image, either plainly (control) or
// through the entrypoint with caps (nil: the entrypoint's usual four), and
// parses KEY=VALUE and "Key: value" lines, plus exit.
func runScript(c engine.Engine, do Options, img, helper, dir, policyDir string, plain bool, caps []string) (map[string]string, error) {
	var out, errb bytes.Buffer
	o := sandbox.Options{
		Session: "doctor-" + state.NewSessionID(), Image: img, ProjectDir: dir, Command: []string{"sh", "/project/probe.sh"},
		Mode: contract.ModeAllow, Helper: helper, PolicyDir: policyDir, CapAdd: caps, Owner: state.Owner(), Logf: do.Logf,
		Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &errb,
		Remote: do.projectVolume != "", ProjectVolume: do.projectVolume,
	}
	if plain {
		o.Plain = true
		o.CapAdd = []string{"NET_RAW"}
	}
	exit, err := sandbox.Run(c, o)
	if err != nil {
		return nil, err
	}
	res := map[string]string{"exit": strconv.Itoa(exit.Code)}
	if !plain {
		res["entrypoint"] = fmt.Sprintf("%s %d %s", exit.Status.Outcome, exit.Status.Code, exit.Status.Step)
		if exit.StatusErr != nil {
			res["entrypoint"] = exit.StatusErr.Error()
		}
	}
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

// families checks that the sandbox refuses AF_VSOCK and AF_PACKET with the
// entrypoint's EAFNOSUPPORT (a missing capability would say EPERM), next to
// the control opening them in a plain container (root, NET_RAW).
func families(r *Report, ctl, got map[string]string) {
	if got["vsock"] != "EAFNOSUPPORT" || got["packet"] != "EAFNOSUPPORT" {
		r.add("socket families", Fail, "the sandbox opened them or refused them otherwise than the entrypoint's filter does: vsock=%s packet=%s, want EAFNOSUPPORT", got["vsock"], got["packet"])
		return
	}
	if ctl["vsock"] != "ok" && ctl["packet"] != "ok" {
		r.add("socket families", Warn, "refused in the sandbox, but a plain container cannot open them either (vsock=%s packet=%s), so this host does not show the filter at work", ctl["vsock"], ctl["packet"])
		return
	}
	r.add("socket families", Pass, "AF_VSOCK and AF_PACKET are refused in the sandbox (EAFNOSUPPORT) and open in a plain container (vsock=%s packet=%s)", ctl["vsock"], ctl["packet"])
}
