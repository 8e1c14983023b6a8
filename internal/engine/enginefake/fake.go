// Package enginefake is an in-memory engine.Engine for tests: containers, volumes and images with states, every call recorded, failures injected.
package enginefake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/blang/semver/v4"
	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/errorhandling"

	"github.com/aisb-dev/aisb/internal/engine"
)

var _ engine.Engine = (*Fake)(nil)

// Method names an Engine method, as calls are recorded and failures set.
type Method string

const (
	ContainerCreate  Method = "ContainerCreate"
	ContainerStart   Method = "ContainerStart"
	ContainerAttach  Method = "ContainerAttach"
	ContainerWait    Method = "ContainerWait"
	ContainerInspect Method = "ContainerInspect"
	ContainerKill    Method = "ContainerKill"
	ContainerRemove  Method = "ContainerRemove"
	ContainerList    Method = "ContainerList"
	ContainerCopyIn  Method = "ContainerCopyIn"
	ContainerCopyOut Method = "ContainerCopyOut"
	ContainerLogs    Method = "ContainerLogs"
	ContainerExec    Method = "ContainerExec"
	VolumeCreate     Method = "VolumeCreate"
	VolumeExists     Method = "VolumeExists"
	VolumeInspect    Method = "VolumeInspect"
	VolumeList       Method = "VolumeList"
	VolumeRemove     Method = "VolumeRemove"
	ImageExists      Method = "ImageExists"
	ImageGet         Method = "ImageGet"
	ImageList        Method = "ImageList"
	ImageBuild       Method = "ImageBuild"
	ImagePull        Method = "ImagePull"
	Info             Method = "Info"
	DiskUsage        Method = "DiskUsage"
)

// ErrServiceLost is what every call returns once the service is lost
// (LoseService, LoseServiceAfter).
var ErrServiceLost = errors.New("enginefake: the podman service is gone")

// Call is one recorded call. Name is the container, volume or image it
// named (a create: the spec's name; a list: empty); Kind is the
// container's engine.LabelKind label, when the call named a container the
// fake knew.
type Call struct {
	Method Method
	Name   string
	Kind   string
	Arg    string // the signal of a kill, the path of a copy
	Err    error  // what the call returned
}

// String is "Method kind name arg", the parts that are set.
func (c Call) String() string {
	parts := []string{string(c.Method)}
	for _, p := range []string{c.Kind, c.Name, c.Arg} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, " ")
}

// Match selects calls by the container, volume or image they name and by
// the container's kind; an empty field matches anything.
type Match struct {
	Name string
	Kind string
}

// Name matches the calls that name name.
func Name(name string) Match { return Match{Name: name} }

// Kind matches the calls on containers of kind (their engine.LabelKind).
func Kind(kind string) Match { return Match{Kind: kind} }

// Any matches every call.
var Any = Match{}

func (m Match) matches(name, kind string) bool {
	return (m.Name == "" || m.Name == name) && (m.Kind == "" || m.Kind == kind)
}

type failure struct {
	method Method
	match  Match
	err    error
	times  int // left; <0: always
}

// Fake is an in-memory Podman service. Its zero value is not usable: New.
// Its fields describe the service; set them before the calls.
type Fake struct {
	// Version is the service's version (New: 5.4.2).
	Version semver.Version
	// UID is the uid owning the service's socket; UIDKnown false: none
	// can be known (New: this process's, known).
	UID      int
	UIDKnown bool
	// RuntimeDir is LocalRuntimeDir's answer (New: empty, a remote service).
	RuntimeDir string
	// HostInfo is Info's answer (New: pasta and slirp4netns installed).
	HostInfo define.HostInfo
	// Architecture is Arch's answer (New: this host's).
	Architecture string
	// Exec plays the command of a ContainerExec in a running container
	// (nil: the call fails, the fake runs no process).
	Exec func(ctx context.Context, name string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error)

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every change of a container
	calls      []Call
	failures   []*failure
	lostAfter  int // calls left before the service is lost; <0: never
	lost       bool
	containers map[string]*container
	volumes    map[string]*volume
	images     map[string]*image
	exits      []exitRule
	files      []filesRule
	outputs    []outputRule
	next       int
}

// New is an empty service: no containers, volumes or images.
func New() *Fake {
	return &Fake{
		Version:      semver.MustParse("5.4.2"),
		UID:          os.Geteuid(),
		UIDKnown:     true,
		HostInfo:     define.HostInfo{Pasta: define.PastaInfo{Executable: "/usr/bin/pasta"}, Slirp4NetNS: define.SlirpInfo{Executable: "/usr/bin/slirp4netns"}},
		Architecture: runtime.GOARCH,
		changed:      make(chan struct{}),
		lostAfter:    -1,
		containers:   map[string]*container{},
		volumes:      map[string]*volume{},
		images:       map[string]*image{},
	}
}

// Fail makes every call of method that m matches fail with err.
func (f *Fake) Fail(method Method, m Match, err error) { f.FailTimes(method, m, err, -1) }

// FailTimes is Fail for the next n matching calls only.
func (f *Fake) FailTimes(method Method, m Match, err error, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, &failure{method: method, match: m, err: err, times: n})
}

// LoseService makes every later call fail with ErrServiceLost, and Alive
// false.
func (f *Fake) LoseService() { f.LoseServiceAfter(0) }

// LoseServiceAfter lets n more calls through, then loses the service.
func (f *Fake) LoseServiceAfter(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lostAfter = n
	if n == 0 {
		f.loseLocked()
	}
}

func (f *Fake) loseLocked() {
	f.lost = true
	f.broadcastLocked() // an attach or a wait in progress ends
}

// Calls is every call so far, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Log is Calls as strings (Call.String), the form a test compares.
func (f *Fake) Log() []string {
	var out []string
	for _, c := range f.Calls() {
		out = append(out, c.String())
	}
	return out
}

// begin records a call and says whether it fails before it does anything:
// a cancelled ctx, the lost service, an injected failure. Called with f.mu
// held; end records the outcome.
func (f *Fake) begin(ctx context.Context, c Call) (int, error) {
	f.calls = append(f.calls, c)
	i := len(f.calls) - 1
	if ctx != nil && ctx.Err() != nil {
		return i, ctx.Err()
	}
	if f.lostAfter == 0 && !f.lost {
		f.loseLocked()
	}
	if f.lost {
		return i, ErrServiceLost
	}
	if f.lostAfter > 0 {
		f.lostAfter--
	}
	for _, fl := range f.failures {
		if fl.method == c.Method && fl.times != 0 && fl.match.matches(c.Name, c.Kind) {
			if fl.times > 0 {
				fl.times--
			}
			return i, fl.err
		}
	}
	return i, nil
}

// end records err as call i's outcome and returns it.
func (f *Fake) end(i int, err error) error {
	f.calls[i].Err = err
	return err
}

// broadcastLocked wakes whatever waits for a change.
func (f *Fake) broadcastLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// notFound and conflict are errors as the bindings return them, so that
// engine.IsNotFound and its kind see them as Podman's own.
func notFound(what, name string) error {
	return &errorhandling.ErrorModel{Because: "no such " + what, Message: fmt.Sprintf("no such %s %s", what, name), ResponseCode: http.StatusNotFound}
}

func conflict(msg string) error {
	return &errorhandling.ErrorModel{Because: msg, Message: msg, ResponseCode: http.StatusConflict}
}

// ServiceVersion is f.Version.
func (f *Fake) ServiceVersion() semver.Version { return f.Version }

// RequirePasta is engine's answer for f.Version.
func (f *Fake) RequirePasta() error { return engine.RequirePastaOf(f.Version) }

func (f *Fake) ServiceUID() (int, bool) { return f.UID, f.UIDKnown }

// SameUser is Conn's rule on f.UID.
func (f *Fake) SameUser() bool { return f.UIDKnown && f.UID != 0 && f.UID == os.Geteuid() }

func (f *Fake) LocalRuntimeDir() string { return f.RuntimeDir }

// Arch is f.Architecture.
func (f *Fake) Arch(context.Context) (string, error) { return f.Architecture, nil }

// Alive is false once the service is lost.
func (f *Fake) Alive() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.lost
}
