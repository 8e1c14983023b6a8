package gate

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/aisb-dev/aisb/allowlist"
	"github.com/aisb-dev/aisb/engine"
)

// A long-lived gate is started once by `aisb gate up NAME`, used by any
// session that names it, and audited under its name by a detached follower.

// UpOptions start a long-lived gate.
type UpOptions struct {
	Name      string
	Dir       string // the gate's directory
	Image     string
	Allowlist []allowlist.Host
	SSHHosts  []allowlist.Host
	DNS       []netip.Addr
	// Follower is the argv of the detached audit follower; --port PORT is
	// appended. It must outlive the command that starts the gate.
	Follower []string
}

// followerPid is the follower's pid file in the gate's directory.
const followerPid = "follower.pid"

// Up starts the long-lived gate and its audit follower.
func Up(c *engine.Conn, o UpOptions) (*Gate, error) {
	if _, err := Find(c, o.Name, o.Dir); err == nil {
		return nil, fmt.Errorf("gate up: %s is already running; aisb gate down %s first", o.Name, o.Name)
	}
	if err := engine.Remove(c, ContainerName(o.Name)); err != nil {
		return nil, fmt.Errorf("gate up: %w", err)
	}
	g, err := Start(c, Options{Session: o.Name, Dir: o.Dir, Image: o.Image, Allowlist: o.Allowlist, SSHHosts: o.SSHHosts, DNS: o.DNS})
	if err != nil {
		return nil, err
	}
	f := exec.Command(o.Follower[0], append(o.Follower[1:], "--port", strconv.Itoa(g.Port))...)
	f.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := f.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("gate up: start the audit follower: %w", err), g.Stop(c))
	}
	if err := os.WriteFile(filepath.Join(o.Dir, followerPid), []byte(strconv.Itoa(f.Process.Pid)), 0o600); err != nil {
		// Without its pid, gate down could not stop the follower.
		_ = f.Process.Kill()
		return nil, errors.Join(fmt.Errorf("gate up: record the audit follower: %w", err), g.Stop(c))
	}
	_ = f.Process.Release() // detached: never waited for
	return g, nil
}

// Down removes the long-lived gate and stops its follower.
func Down(c *engine.Conn, name, dir string) error {
	if err := engine.Remove(c, ContainerName(name)); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, followerPid))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gate down: %w", err)
	}
	if pid, err := strconv.Atoi(string(b)); err == nil && pid > 1 {
		// Gone already is fine: the follower also stops when the port closes.
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	return os.Remove(filepath.Join(dir, followerPid))
}

// Find returns the running gate of a long-lived name, reading its port back
// from its squid.conf in dir.
func Find(c *engine.Conn, name, dir string) (*Gate, error) {
	g := &Gate{Name: ContainerName(name), Session: name, Dir: dir}
	if !g.running(c) {
		return nil, fmt.Errorf("gate %s is not running; start it with `aisb gate up %s`", name, name)
	}
	b, err := os.ReadFile(filepath.Join(dir, "squid.conf"))
	if err != nil {
		return nil, fmt.Errorf("gate %s: %w", name, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "http_port 127.0.0.1:"); ok {
			fmt.Sscanf(p, "%d", &g.Port)
		}
	}
	if g.Port == 0 {
		return nil, fmt.Errorf("gate %s: no http_port in its squid.conf", name)
	}
	return g, nil
}

// Info describes one gate container.
type Info struct {
	Name      string `json:"name"`
	Session   string `json:"session"`
	LongLived bool   `json:"long_lived"`
	State     string `json:"state"`
	Container string `json:"container"`
}

// List lists every gate container of this user, session gates included.
func List(c *engine.Conn) ([]Info, error) {
	list, err := containers.List(c.Ctx, new(containers.ListOptions).WithAll(true).
		WithFilters(map[string][]string{"label": {engine.LabelKind + "=gate"}}))
	if err != nil {
		return nil, fmt.Errorf("list gates: %w", err)
	}
	var infos []Info
	for _, ctr := range list {
		_, owned := ctr.Labels[engine.LabelOwner]
		name := ""
		if len(ctr.Names) > 0 {
			name = ctr.Names[0]
		}
		infos = append(infos, Info{Name: ctr.Labels[engine.LabelSession], Session: ctr.Labels[engine.LabelSession],
			LongLived: !owned, State: ctr.State, Container: name})
	}
	return infos, nil
}
