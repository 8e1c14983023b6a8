package doctor

// doctor on an engine that is not local (engine.Locality: another user's
// Podman, another host's; docs/remote.md). What it checks is that engine's:
// its version, its network helper, its storage and cgroups (from its
// `podman info`), its user namespace's subordinate ids (from the same
// info, not this host's /etc/subuid), the images (built there), a gate
// started there through the remote path a session takes (the probe on that
// host's loopback, the files copied in, squid's check of its TLS port), and
// the sandbox checks with the sandbox made as a session's is there: the
// policy and the probe copied in, nothing of this host mounted. Their
// targets listen on the engine host's loopback (a container on its host
// network), since that is what the sandbox's mapped loopback reaches.
// This host's runtime directory is not the engine's and is not checked.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/progs"
	"github.com/aisb-dev/aisb/internal/state"
)

// engineIDs checks the subordinate ids of the engine's user namespace, as
// its `podman info` maps them (the entry at 0 is its user's own id).
func engineIDs(r *Report, info *define.Info) {
	uids, gids := 0, 0
	for _, e := range info.Host.IDMappings.UIDMap {
		if e.ContainerID != 0 {
			uids += e.Size
		}
	}
	for _, e := range info.Host.IDMappings.GIDMap {
		if e.ContainerID != 0 {
			gids += e.Size
		}
	}
	for _, m := range []struct {
		name string
		n    int
	}{{"uid", uids}, {"gid", gids}} {
		if m.n >= 65536 {
			r.add("subordinate ids", Pass, "the engine's user namespace maps %d subordinate %ss", m.n, m.name)
		} else {
			r.add("subordinate ids", Fail, "the engine's user namespace maps %d subordinate %ss; its user needs a range of 65536 in its host's /etc/sub%s (usermod --add-sub%ss)", m.n, m.name, m.name, m.name)
		}
	}
}

// remoteGate starts a gate on the engine's host the way a session there
// does (gate.Remote) and stops it: its probe, its files copied in, squid
// ready.
func remoteGate(ctx context.Context, r *Report, c engine.Engine, o Options) {
	img, _, err := image.Ensure(c, gate.ImageSpec(o.BaseImage), image.Build{LockDir: o.Paths.LockDir(), Output: o.Builds, Logf: o.Logf})
	if err != nil {
		r.add("gate", Fail, "gate image: %v", err)
		return
	}
	arch, err := c.Arch(ctx)
	if err != nil {
		r.add("gate", Fail, "%v", err)
		return
	}
	probe, err := progs.Find(progs.GateHelper, arch, o.GateHelper)
	if err != nil {
		r.add("gate", Fail, "%v", err)
		return
	}
	dir, err := os.MkdirTemp("", "aisb-doctor-")
	if err != nil {
		r.add("gate", Fail, "%v", err)
		return
	}
	defer os.RemoveAll(dir)
	hosts, _ := allowlist.Parse([]string{"api.example.com", ".example.org", "192.0.2.7"})
	start := time.Now()
	g, err := gate.Create(c, gate.Options{Session: "doctor-" + state.NewSessionID(), Dir: filepath.Join(dir, "gate"), Image: img,
		Allowlist: hosts, Owner: state.Owner(), Remote: &gate.Remote{Probe: probe}})
	if err == nil {
		err = g.Open(c)
	}
	if err != nil {
		r.add("gate", Fail, "%v", err)
		return
	}
	took := time.Since(start)
	killErr := g.Kill(c)
	log, _ := os.ReadFile(filepath.Join(g.Dir, "cache.log"))
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "ERROR") || strings.Contains(l, "FATAL") {
			r.add("gate", Fail, "squid on the engine's host: %s", strings.TrimSpace(l))
			return
		}
	}
	if killErr != nil {
		r.add("gate", Fail, "the gate started but was not removed: %v", killErr)
		return
	}
	r.add("gate", Pass, "a gate started on the engine's host through its API in %s (its probe took ports %d and %d on that host's loopback, its squid.conf and TLS files were copied in, squid checked its TLS port), then was removed",
		took.Round(time.Millisecond), g.Port, g.TLSPort)
}

// targetsScript listens on the engine host's loopback as newTargets does
// here, and prints the ports as one JSON line.
const targetsScript = `import json, socket, threading
def tcp():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    def serve():
        while True:
            c, _ = s.accept()
            c.close()
    threading.Thread(target=serve, daemon=True).start()
    return s.getsockname()[1]
g, o = tcp(), tcp()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", 0))
print(json.dumps({"gate": g, "other": o, "udp": u.getsockname()[1]}), flush=True)
while True:
    d, a = u.recvfrom(512)
    u.sendto(d, a)
`

// remoteTargets runs doctor's targets in a container on the engine host's
// network (img has python3: the sandbox image), removed by close.
func remoteTargets(c engine.Engine, img string) (*targets, error) {
	s := specgen.NewSpecGenerator(img, false)
	s.Name = "aisb-doctor-targets-" + state.NewSessionID()
	s.Entrypoint = []string{"python3", "-c", targetsScript}
	s.NetNS = specgen.Namespace{NSMode: specgen.Host}
	s.Labels = map[string]string{engine.LabelKind: "doctor", engine.LabelOwner: state.Owner()}
	if _, err := c.ContainerCreate(context.TODO(), s); err != nil {
		return nil, fmt.Errorf("create %s: %w", s.Name, err)
	}
	t := &targets{closers: []func() error{func() error {
		return c.ContainerRemove(context.TODO(), s.Name, engine.RemoveOptions{Force: true, Ignore: true, Timeout: new(uint)})
	}}}
	fail := func(err error) (*targets, error) {
		t.close()
		return nil, err
	}
	if err := c.ContainerStart(context.TODO(), s.Name); err != nil {
		return fail(fmt.Errorf("start %s: %w", s.Name, err))
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		var out, errb bytes.Buffer
		err := c.ContainerLogs(context.TODO(), s.Name, false, &out, &errb)
		if line, _, ok := bytes.Cut(out.Bytes(), []byte("\n")); err == nil && ok {
			var p struct{ Gate, Other, UDP int }
			if err := json.Unmarshal(line, &p); err != nil || p.Gate == 0 || p.Other == 0 || p.UDP == 0 {
				return fail(fmt.Errorf("%s said %q: %v", s.Name, truncate(line, 200), err))
			}
			t.gate, t.other, t.udp = p.Gate, p.Other, p.UDP
			return t, nil
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("%s said nothing within 20 s: %v %s", s.Name, err, truncate(errb.Bytes(), 300)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// remoteProject is the volume a remote sandbox check's project is copied
// into (the probe script), removed by the returned func.
func remoteProject(c engine.Engine) (string, func(), error) {
	name := "aisb-doctor-" + state.NewSessionID()
	if _, err := c.VolumeCreate(context.TODO(), types.VolumeCreateOptions{Name: name,
		Label: map[string]string{engine.LabelKind: "project", engine.LabelOwner: state.Owner()}}); err != nil {
		return "", nil, fmt.Errorf("project volume: %w", err)
	}
	return name, func() { c.VolumeRemove(context.TODO(), name) }, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}
