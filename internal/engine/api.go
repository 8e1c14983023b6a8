package engine

import (
	"context"
	"io"

	"github.com/blang/semver/v4"
	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/specgen"
)

// Engine is every Podman call aisb makes, and what aisb asks of the
// service it talks to. *Conn implements it over Podman's bindings, which no
// other package imports (internal/layers checks); enginefake implements it in
// memory for tests. It follows Podman's own ContainerEngine
// (pkg/domain/entities), narrowed to what aisb calls.
//
// A method's ctx bounds that one call; the connection is the engine's own.
// Errors are the service's as they come (IsNotFound recognises a 404).
type Engine interface {
	// ContainerCreate creates a container from s. Creates run one at a
	// time per service (Podman's own are not safe to overlap; see Create).
	ContainerCreate(ctx context.Context, s *specgen.SpecGenerator) (types.ContainerCreateResponse, error)
	ContainerStart(ctx context.Context, name string) error
	// ContainerAttach attaches to the streams of the container until it
	// ends or ctx is cancelled; attachReady receives once attached.
	ContainerAttach(ctx context.Context, name string, stdin io.Reader, stdout, stderr io.Writer, attachReady chan bool, o AttachOptions) error
	// ContainerWait waits for one of conditions (none: Podman's default,
	// the container stopped and cleaned up) and returns the exit code.
	ContainerWait(ctx context.Context, name string, conditions ...define.ContainerStatus) (int32, error)
	ContainerInspect(ctx context.Context, name string) (*define.InspectContainerData, error)
	// ContainerKill sends signal (a name such as "KILL" or a number).
	ContainerKill(ctx context.Context, name, signal string) error
	ContainerRemove(ctx context.Context, name string, o RemoveOptions) error
	// ContainerList lists all containers, running or not, that match
	// filters (Podman's: "label", "volume", ...).
	ContainerList(ctx context.Context, filters map[string][]string) ([]types.ListContainer, error)
	// ContainerCopyIn extracts the tar archive into the container at path
	// (the bindings' CopyFromArchive); chown: its entries become the
	// container's root's.
	ContainerCopyIn(ctx context.Context, name, path string, archive io.Reader, o CopyOptions) error
	// ContainerCopyOut writes path in the container to w as a tar archive
	// (the bindings' CopyToArchive).
	ContainerCopyOut(ctx context.Context, name, path string, w io.Writer) error
	// ContainerLogs writes what the container wrote to its stdout and
	// stderr, from its start, to stdout and stderr (each line whole); with
	// follow, it goes on until the container stops or ctx ends: how a gate
	// on an engine that is not local hands aisb its access log.
	ContainerLogs(ctx context.Context, name string, follow bool, stdout, stderr io.Writer) error
	// ContainerExec runs argv in the running container name, as its user
	// and without a terminal, attached to stdin, stdout and stderr, until
	// it exits (or ctx ends), and returns its exit code: how a gate on an
	// engine that is not local relays its helper's questions to aisb.
	// The command ends when stdin does only if it reads it to its end.
	ContainerExec(ctx context.Context, name string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error)

	VolumeCreate(ctx context.Context, o types.VolumeCreateOptions) (*types.VolumeConfigResponse, error)
	VolumeExists(ctx context.Context, name string) (bool, error)
	VolumeInspect(ctx context.Context, name string) (*types.VolumeConfigResponse, error)
	VolumeList(ctx context.Context, filters map[string][]string) ([]*types.VolumeListReport, error)
	VolumeRemove(ctx context.Context, name string) error

	ImageExists(ctx context.Context, name string) (bool, error)
	ImageGet(ctx context.Context, name string) (*types.ImageInspectReport, error)
	ImageList(ctx context.Context, filters map[string][]string) ([]*types.ImageSummary, error)
	ImageBuild(ctx context.Context, containerFiles []string, o types.BuildOptions) (*types.BuildReport, error)
	// ImagePull pulls name, writing Podman's progress to progress.
	ImagePull(ctx context.Context, name string, progress io.Writer) ([]string, error)

	// Info is `podman info`.
	Info(ctx context.Context) (*define.Info, error)
	// DiskUsage is `podman system df`.
	DiskUsage(ctx context.Context) (*types.SystemDfReport, error)

	// What aisb knows of the service without a call.

	// ServiceVersion is the service's version, as it said on connect.
	ServiceVersion() semver.Version
	// RequirePasta says why the service has no pasta network mode, if so.
	RequirePasta() error
	// ServiceUID is the uid that owns the service's unix socket.
	ServiceUID() (int, bool)
	// SameUser says whether the service runs as this process's uid.
	SameUser() bool
	// LocalRuntimeDir is the user's runtime directory when the service runs
	// on this host; empty otherwise.
	LocalRuntimeDir() string
	// Arch is the architecture (GOARCH's name) of the machine the service
	// runs containers on: known without a call for a Podman of this Linux
	// host (HostArch), else asked of the service once.
	Arch(ctx context.Context) (string, error)
	// Alive says whether the service still listens.
	Alive() bool
}

// AttachOptions are what aisb sets on an attach: the streams always.
type AttachOptions struct {
	// NoDetachKeys sends empty detach keys (the agent keeps Ctrl-P); only
	// a service of MinEmptyDetachKeys or newer accepts them.
	NoDetachKeys bool
}

// RemoveOptions are those of Podman's container remove.
type RemoveOptions struct {
	Force   bool
	Ignore  bool  // a missing container is no error
	Timeout *uint // seconds to wait for a stop before the kill; nil: the container's own
}

// CopyOptions are those of a copy into a container.
type CopyOptions struct {
	Chown bool // entries become the container's root's (else the archive's owners)
	// KeepOwners keeps the archive's owners, as ids inside the container
	// (a service left to its default chowns a copy to the container's
	// user); a remote gate's files are its proxy user's, a remote
	// project's the agent's.
	KeepOwners bool
}
