package gate

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/state"
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
	// appended (and --remote for an engine that is not local). It must
	// outlive the command that starts the gate.
	Follower []string
	// Remote, set for an engine that is not local (longremote.go), is the
	// gate's probe; Engine is then that engine's URI, recorded.
	Remote *Remote
	Engine string
}

// oldFollowerPid is where an earlier aisb kept the follower's pid, in the
// directory squid writes; it is removed, never read.
const oldFollowerPid = "follower.pid"

// Up starts the long-lived gate and its audit follower.
func Up(c engine.Engine, o UpOptions) (*Gate, error) {
	if o.Remote == nil {
		o.Engine = ""
	}
	// A gate of this name recorded on another engine may still run there,
	// its follower here: its record is not overwritten.
	if rec, err := ReadRecord(o.Dir); err == nil {
		if err := checkEngine(o.Name, rec, o.Engine); err != nil {
			return nil, fmt.Errorf("gate up: %w", err)
		}
	}
	if _, err := Find(c, o.Name, o.Dir, o.Engine); err == nil {
		return nil, fmt.Errorf("gate up: %s is already running; aisb gate down %s first", o.Name, o.Name)
	}
	if err := engine.Remove(context.TODO(), c, ContainerName(o.Name)); err != nil {
		return nil, fmt.Errorf("gate up: %w", err)
	}
	g, err := Start(c, Options{Session: o.Name, Dir: o.Dir, Image: o.Image, Allowlist: o.Allowlist, SSHHosts: o.SSHHosts, DNS: o.DNS, Remote: o.Remote})
	if err != nil {
		return nil, err
	}
	args := append(o.Follower[1:], "--port", strconv.Itoa(g.Port))
	if o.Remote != nil {
		// The follower copies the logs from the container's start.
		g.releaseLogs()
		args = append(args, "--remote")
	}
	f := exec.Command(o.Follower[0], args...)
	f.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := f.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("gate up: start the audit follower: %w", err), g.Stop(c))
	}
	// The port and the follower are recorded beside the gate's directory,
	// where squid cannot write.
	if err := WriteRecord(o.Dir, Record{Port: g.Port, Token: g.token, Follower: state.OwnerOf(f.Process.Pid), Engine: o.Engine}); err != nil {
		// Without its record, gate down could not stop the follower.
		_ = f.Process.Kill()
		return nil, errors.Join(fmt.Errorf("gate up: record the audit follower: %w", err), g.Stop(c))
	}
	_ = f.Process.Release() // detached: never waited for
	return g, nil
}

// Down removes the long-lived gate and stops its follower; where is the
// engine c ("" the local one, else the URI of one that is not local).
func Down(c engine.Engine, name, dir, where string) error {
	rec, recErr := ReadRecord(dir)
	if recErr == nil {
		if err := checkEngine(name, rec, where); err != nil {
			return fmt.Errorf("gate down: %w", err)
		}
	}
	if recErr == nil && rec.Engine != "" {
		if err := downRemote(c, name, rec); err != nil {
			return err
		}
	} else if err := engine.Remove(context.TODO(), c, ContainerName(name)); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, oldFollowerPid))
	if errors.Is(recErr, ErrNoRecord) {
		return nil
	}
	if recErr != nil {
		return fmt.Errorf("gate down: %w", recErr)
	}
	// Only the follower aisb recorded, and only while that very process
	// (pid and start time) lives. Gone already is fine: the follower also
	// stops when the port closes.
	if pid, _, ok := strings.Cut(rec.Follower, ":"); ok && state.OwnerAlive(rec.Follower) {
		if n, err := strconv.Atoi(pid); err == nil && n > 1 {
			_ = syscall.Kill(n, syscall.SIGTERM)
		}
	}
	return RemoveRecord(dir)
}

// Find returns the running gate of a long-lived name on the engine c
// (where: "" the local one, else the URI of one that is not local, which
// must be the one the gate's record names). Its port comes from aisb's own
// record (see Record), never from the squid.conf in dir, which squid can
// rewrite.
func Find(c engine.Engine, name, dir, where string) (*Gate, error) {
	g := &Gate{Name: ContainerName(name), Session: name, Dir: dir}
	if !g.running(c) {
		return nil, fmt.Errorf("gate %s is not running; start it with `aisb gate up %s`", name, name)
	}
	rec, err := ReadRecord(dir)
	if errors.Is(err, ErrNoRecord) {
		return nil, fmt.Errorf("gate %s: %w (started by an earlier aisb?); restart it with `aisb gate down %s && aisb gate up %s`", name, err, name, name)
	}
	if err != nil {
		return nil, fmt.Errorf("gate %s: %w", name, err)
	}
	if err := checkEngine(name, rec, where); err != nil {
		return nil, err
	}
	g.Port, g.token = rec.Port, rec.Token
	if where != "" {
		g.remote = c
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
func List(c engine.Engine) ([]Info, error) {
	list, err := c.ContainerList(context.TODO(), map[string][]string{"label": {engine.LabelKind + "=gate"}})
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
