package enginefake

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
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

type exitRule struct {
	match Match
	code  int32
}

type filesRule struct {
	match Match
	files map[string][]byte
}

// ExitOnStart makes the containers m matches, created later, exit with
// code as soon as they start (a sandbox whose command ends at once).
// Without it a started container runs until killed or removed (Exit ends
// it from the test).
func (f *Fake) ExitOnStart(m Match, code int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exits = append(f.exits, exitRule{m, code})
}

// Files puts files (absolute path -> content, owned by the container's
// root) into the containers m matches, created later: what a copy out of
// them finds (the entrypoint's status file, say).
func (f *Fake) Files(m Match, files map[string][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files = append(f.files, filesRule{m, maps.Clone(files)})
}

// Exit ends the running container name with code, as its process exiting
// would.
func (f *Fake) Exit(name string, code int32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[name]
	if !ok || c.state != StateRunning {
		return fmt.Errorf("enginefake: exit %s: not running", name)
	}
	f.exitLocked(c, code)
	return nil
}

func (f *Fake) exitLocked(c *container, code int32) {
	c.state, c.code = StateExited, code
	f.broadcastLocked()
}

// Container is the container name as it is now.
func (f *Fake) Container(name string) (Container, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.find(name)
	if !ok {
		return Container{}, false
	}
	return Container{ID: c.id, Name: c.name, State: c.state, ExitCode: c.code, Labels: maps.Clone(c.spec.Labels), Spec: c.spec, Files: maps.Clone(c.files)}, true
}

// ContainerNames are the containers that exist, sorted.
func (f *Fake) ContainerNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.containers))
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
// has exited or is gone (or ctx ends, or the service is lost). It neither
// reads stdin nor writes stdout or stderr.
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
	return f.waitFor(ctx, func() (bool, error) {
		if _, ok := f.containers[c.name]; !ok || c.state == StateExited {
			return true, nil
		}
		return false, nil
	})
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

// ContainerList knows the filters aisb uses: "label" (key or key=value)
// and "volume" (a named volume's name).
func (f *Fake) ContainerList(ctx context.Context, filters map[string][]string) ([]types.ListContainer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: ContainerList})
	if err != nil {
		return nil, f.end(i, err)
	}
	var out []types.ListContainer
	for _, name := range slices.Sorted(maps.Keys(f.containers)) {
		c := f.containers[name]
		ok, err := matchFilters(filters, c.spec.Labels, func(v string) bool {
			return slices.ContainsFunc(c.spec.Volumes, func(nv *specgen.NamedVolume) bool { return nv.Name == v })
		})
		if err != nil {
			return nil, f.end(i, err)
		}
		if ok {
			out = append(out, types.ListContainer{ID: c.id, Names: []string{c.name}, Image: c.spec.Image, Labels: maps.Clone(c.spec.Labels),
				State: c.state, Exited: c.state == StateExited, ExitCode: c.code})
		}
	}
	return out, f.end(i, nil)
}

// matchFilters applies Podman's filters: each key's values any, all keys
// (a "label" filter: all of its values); volume answers the "volume" key.
func matchFilters(filters map[string][]string, labels map[string]string, volume func(string) bool) (bool, error) {
	for key, values := range filters {
		switch key {
		case "label":
			for _, v := range values {
				k, val, hasVal := strings.Cut(v, "=")
				got, ok := labels[k]
				if !ok || hasVal && got != val {
					return false, nil
				}
			}
		case "volume":
			if volume == nil || !slices.ContainsFunc(values, volume) {
				return false, nil
			}
		default:
			return false, fmt.Errorf("enginefake: filter %q is not supported", key)
		}
	}
	return true, nil
}

// files is where path of container c lives: a named volume mounted over
// it, else the container's own files; key is path's key there.
func (f *Fake) filesAt(c *container, p string) (files map[string][]byte, key string) {
	for _, nv := range c.spec.Volumes {
		if v, ok := f.volumes[nv.Name]; ok && (p == nv.Dest || strings.HasPrefix(p, strings.TrimSuffix(nv.Dest, "/")+"/")) {
			return v.files, "/" + strings.TrimPrefix(strings.TrimPrefix(p, nv.Dest), "/")
		}
	}
	return c.files, p
}

// ContainerCopyIn extracts the archive's regular files under dir.
func (f *Fake) ContainerCopyIn(ctx context.Context, name, dir string, archive io.Reader, o engine.CopyOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, i, err := f.beginContainer(ctx, ContainerCopyIn, name, dir)
	if err != nil {
		return f.end(i, err)
	}
	tr := tar.NewReader(archive)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return f.end(i, nil)
		}
		if err != nil {
			return f.end(i, fmt.Errorf("copy into %s: %w", name, err))
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return f.end(i, fmt.Errorf("copy into %s: %w", name, err))
		}
		files, key := f.filesAt(c, path.Join(dir, h.Name))
		files[key] = b
	}
}

// ContainerCopyOut writes a tar of path: the file itself (named by its
// base name) or, for a directory (also "dir/."), the files under it (named
// relative to it); a path with nothing there is a 404, as Podman's.
func (f *Fake) ContainerCopyOut(ctx context.Context, name, p string, w io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, i, err := f.beginContainer(ctx, ContainerCopyOut, name, p)
	if err != nil {
		return f.end(i, err)
	}
	files, key := f.filesAt(c, path.Clean(p))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	found := key == "/" // a container's root or a volume's always exists
	for _, k := range slices.Sorted(maps.Keys(files)) {
		entry := ""
		switch {
		case k == key:
			entry = path.Base(k)
		case key == "/" || strings.HasPrefix(k, key+"/"):
			entry = strings.TrimPrefix(strings.TrimPrefix(k, key), "/")
		default:
			continue
		}
		found = true
		tw.WriteHeader(&tar.Header{Name: entry, Mode: 0o644, Size: int64(len(files[k])), Typeflag: tar.TypeReg})
		tw.Write(files[k])
	}
	if !found {
		return f.end(i, notFound("file", p))
	}
	tw.Close()
	_, err = w.Write(buf.Bytes())
	return f.end(i, err)
}
