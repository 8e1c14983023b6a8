package enginefake

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/engine"
)

// States a fake container is in (Podman's words).
const (
	StateCreated = "created"
	StateRunning = "running"
	StateExited  = "exited"
)

type container struct {
	id, name string
	spec     *specgen.SpecGenerator
	state    string
	code     int32
	files    map[string][]byte // absolute path in the container -> content
	exitCode *int32            // set: it exits at start with it
	stdout   []byte            // what an attach writes once it has exited
	stderr   []byte
}

func (c *container) kind() string { return c.spec.Labels[engine.LabelKind] }

// Container is what a test sees of a container.
type Container struct {
	ID, Name string
	State    string
	ExitCode int32
	Labels   map[string]string
	Spec     *specgen.SpecGenerator
	Files    map[string][]byte // what copies into it put there (not its volumes')
}

// find looks a container up by name or id.
func (f *Fake) find(nameOrID string) (*container, bool) {
	if c, ok := f.containers[nameOrID]; ok {
		return c, true
	}
	for _, c := range f.containers {
		if c.id == nameOrID {
			return c, true
		}
	}
	return nil, false
}

// beginContainer is begin for a call that names a container.
func (f *Fake) beginContainer(ctx context.Context, m Method, name, arg string) (*container, int, error) {
	c, ok := f.find(name)
	kind := ""
	if ok {
		kind = c.kind()
	}
	i, err := f.begin(ctx, Call{Method: m, Name: name, Kind: kind, Arg: arg})
	if err == nil && !ok {
		err = notFound("container", name)
	}
	return c, i, err
}

func (f *Fake) ContainerCreate(ctx context.Context, s *specgen.SpecGenerator) (types.ContainerCreateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: ContainerCreate, Name: s.Name, Kind: s.Labels[engine.LabelKind]})
	if err != nil {
		return types.ContainerCreateResponse{}, f.end(i, err)
	}
	f.next++
	c := &container{id: fmt.Sprintf("%064x", f.next), name: s.Name, spec: s, state: StateCreated, files: map[string][]byte{}}
	if c.name == "" {
		c.name = fmt.Sprintf("fake_%d", f.next)
	}
	if _, ok := f.containers[c.name]; ok {
		return types.ContainerCreateResponse{}, f.end(i, conflict("the container name "+strconv.Quote(c.name)+" is already in use"))
	}
	for _, r := range f.exits {
		if r.match.matches(c.name, c.kind()) {
			c.exitCode = &r.code
		}
	}
	for _, r := range f.files {
		if r.match.matches(c.name, c.kind()) {
			maps.Copy(c.files, r.files)
		}
	}
	for _, r := range f.outputs {
		if r.match.matches(c.name, c.kind()) {
			c.stdout, c.stderr = r.stdout, r.stderr
		}
	}
	f.containers[c.name] = c
	f.broadcastLocked()
	return types.ContainerCreateResponse{ID: c.id}, f.end(i, nil)
}

func (f *Fake) ContainerStart(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, i, err := f.beginContainer(ctx, ContainerStart, name, "")
	if err != nil {
		return f.end(i, err)
	}
	if c.state == StateRunning {
		return f.end(i, nil)
	}
	c.state = StateRunning
	f.broadcastLocked()
	if c.exitCode != nil {
		f.exitLocked(c, *c.exitCode)
	}
	return f.end(i, nil)
}

// ContainerAttach says it is attached, then returns once the container
// has exited or is gone (or ctx ends, or the service is lost). It never
// reads stdin; once the container has exited it writes what Output gave.
func (f *Fake) ContainerAttach(ctx context.Context, name string, stdin io.Reader, stdout, stderr io.Writer, attachReady chan bool, o engine.AttachOptions) error {
	f.mu.Lock()
	c, i, err := f.beginContainer(ctx, ContainerAttach, name, "")
	if err != nil {
		f.end(i, err)
		f.mu.Unlock()
		return err
	}
	f.mu.Unlock()
	if attachReady != nil {
		attachReady <- true
	}
	exited := false
	err = f.waitFor(ctx, func() (bool, error) {
		_, ok := f.containers[c.name]
		exited = ok && c.state == StateExited
		return !ok || exited, nil
	})
	if err == nil && exited {
		if stdout != nil {
			stdout.Write(c.stdout)
		}
		if stderr != nil {
			stderr.Write(c.stderr)
		}
	}
	return err
}

// waitFor waits until done says so, ctx ends or the service is lost.
func (f *Fake) waitFor(ctx context.Context, done func() (bool, error)) error {
	if ctx == nil {
		ctx = context.Background()
	}
	for {
		f.mu.Lock()
		if f.lost {
			f.mu.Unlock()
			return ErrServiceLost
		}
		ok, err := done()
		changed := f.changed
		f.mu.Unlock()
		if ok {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ContainerWait waits for the container to reach one of conditions (none:
// exited); "stopped" counts as exited.
func (f *Fake) ContainerWait(ctx context.Context, name string, conditions ...define.ContainerStatus) (int32, error) {
	f.mu.Lock()
	c, i, err := f.beginContainer(ctx, ContainerWait, name, "")
	if err != nil {
		f.end(i, err)
		f.mu.Unlock()
		return -1, err
	}
	f.mu.Unlock()
	want := map[string]bool{}
	for _, s := range conditions {
		want[s.String()] = true
	}
	if len(conditions) == 0 || want[define.ContainerStateStopped.String()] {
		want[StateExited] = true
	}
	var code int32 = -1
	err = f.waitFor(ctx, func() (bool, error) {
		if _, ok := f.containers[c.name]; !ok {
			return true, notFound("container", name)
		}
		code = c.code
		return want[c.state], nil
	})
	return code, err
}

func (f *Fake) ContainerInspect(ctx context.Context, name string) (*define.InspectContainerData, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, i, err := f.beginContainer(ctx, ContainerInspect, name, "")
	if err != nil {
		return nil, f.end(i, err)
	}
	return &define.InspectContainerData{
		ID: c.id, Name: c.name, ImageName: c.spec.Image,
		State:  &define.InspectContainerState{Status: c.state, Running: c.state == StateRunning, ExitCode: c.code},
		Config: &define.InspectContainerConfig{Labels: maps.Clone(c.spec.Labels)},
	}, f.end(i, nil)
}

// signals are those aisb sends by name; numbers are taken as they are.
var signals = map[string]int{"HUP": 1, "INT": 2, "KILL": 9, "TERM": 15}

// ContainerKill ends the running container with 128+signal, except for a
// SIGHUP (squid re-reads its configuration), which it only records.
func (f *Fake) ContainerKill(ctx context.Context, name, signal string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, i, err := f.beginContainer(ctx, ContainerKill, name, signal)
	if err != nil {
		return f.end(i, err)
	}
	n, ok := signals[strings.TrimPrefix(signal, "SIG")]
	if !ok {
		if n, err = strconv.Atoi(signal); err != nil {
			return f.end(i, fmt.Errorf("invalid signal %q", signal))
		}
	}
	if c.state != StateRunning {
		return f.end(i, conflict("can only kill running containers: "+c.name+" is in state "+c.state))
	}
	if n != 1 {
		f.exitLocked(c, int32(128+n))
	}
	return f.end(i, nil)
}

func (f *Fake) ContainerRemove(ctx context.Context, name string, o engine.RemoveOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, i, err := f.beginContainer(ctx, ContainerRemove, name, "")
	if engine.IsNotFound(err) && o.Ignore {
		return f.end(i, nil)
	}
	if err != nil {
		return f.end(i, err)
	}
	if c.state == StateRunning && !o.Force {
		return f.end(i, conflict("cannot remove container "+c.name+" as it is running"))
	}
	if c.state == StateRunning {
		c.state, c.code = StateExited, 137
	}
	delete(f.containers, c.name)
	f.broadcastLocked()
	return f.end(i, nil)
}
