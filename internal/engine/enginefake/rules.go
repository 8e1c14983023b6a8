package enginefake

import (
	"fmt"
	"maps"
	"slices"
)

type exitRule struct {
	match Match
	code  int32
}

type filesRule struct {
	match Match
	files map[string][]byte
}

type outputRule struct {
	match          Match
	stdout, stderr []byte
}

// Output makes an attach to the containers m matches, created later,
// write stdout and stderr once the container has exited.
func (f *Fake) Output(m Match, stdout, stderr []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outputs = append(f.outputs, outputRule{m, stdout, stderr})
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
