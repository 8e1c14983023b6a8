package engine

import (
	"bufio"
	"context"
	"io"

	"github.com/blang/semver/v4"
	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/bindings/volumes"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
)

var _ Engine = (*Conn)(nil)

// bind is the context of one call: the connection's (c.Ctx, which carries
// the bindings' client and ends with the context Connect was given), also
// ended when ctx ends. done releases it.
func (c *Conn) bind(ctx context.Context) (context.Context, func()) {
	b, cancel := context.WithCancel(c.Ctx)
	if ctx == nil {
		return b, cancel
	}
	stop := context.AfterFunc(ctx, cancel)
	return b, func() { stop(); cancel() }
}

func (c *Conn) ContainerStart(ctx context.Context, name string) error {
	bctx, done := c.bind(ctx)
	defer done()
	return containers.Start(bctx, name, nil)
}

func (c *Conn) ContainerAttach(ctx context.Context, name string, stdin io.Reader, stdout, stderr io.Writer, attachReady chan bool, o AttachOptions) error {
	bctx, done := c.bind(ctx)
	defer done()
	opts := new(containers.AttachOptions).WithStream(true)
	if o.NoDetachKeys {
		opts = opts.WithDetachKeys("")
	}
	return containers.Attach(bctx, name, stdin, stdout, stderr, attachReady, opts)
}

func (c *Conn) ContainerWait(ctx context.Context, name string, conditions ...define.ContainerStatus) (int32, error) {
	bctx, done := c.bind(ctx)
	defer done()
	var opts *containers.WaitOptions
	if len(conditions) > 0 {
		opts = new(containers.WaitOptions).WithCondition(conditions)
	}
	return containers.Wait(bctx, name, opts)
}

func (c *Conn) ContainerInspect(ctx context.Context, name string) (*define.InspectContainerData, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return containers.Inspect(bctx, name, nil)
}

func (c *Conn) ContainerKill(ctx context.Context, name, signal string) error {
	bctx, done := c.bind(ctx)
	defer done()
	return containers.Kill(bctx, name, new(containers.KillOptions).WithSignal(signal))
}

func (c *Conn) ContainerRemove(ctx context.Context, name string, o RemoveOptions) error {
	bctx, done := c.bind(ctx)
	defer done()
	opts := new(containers.RemoveOptions)
	if o.Force {
		opts = opts.WithForce(true)
	}
	if o.Timeout != nil {
		opts = opts.WithTimeout(*o.Timeout)
	}
	if o.Ignore {
		opts = opts.WithIgnore(true)
	}
	_, err := containers.Remove(bctx, name, opts)
	return err
}

func (c *Conn) ContainerList(ctx context.Context, filters map[string][]string) ([]types.ListContainer, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return containers.List(bctx, new(containers.ListOptions).WithAll(true).WithFilters(filters))
}

func (c *Conn) ContainerCopyIn(ctx context.Context, name, path string, archive io.Reader, o CopyOptions) error {
	bctx, done := c.bind(ctx)
	defer done()
	var opts *containers.CopyOptions
	switch {
	case o.Chown:
		opts = new(containers.CopyOptions).WithChown(true)
	case o.KeepOwners:
		opts = new(containers.CopyOptions).WithChown(false)
	}
	copyFn, err := containers.CopyFromArchiveWithOptions(bctx, name, path, archive, opts)
	if err != nil {
		return err
	}
	return copyFn()
}

func (c *Conn) ContainerCopyOut(ctx context.Context, name, path string, w io.Writer) error {
	bctx, done := c.bind(ctx)
	defer done()
	copyFn, err := containers.CopyToArchive(bctx, name, path, w)
	if err != nil {
		return err
	}
	return copyFn()
}

func (c *Conn) ContainerLogs(ctx context.Context, name string, follow bool, stdout, stderr io.Writer) error {
	bctx, done := c.bind(ctx)
	defer done()
	outCh, errCh := make(chan string, 64), make(chan string, 64)
	opts := new(containers.LogOptions).WithFollow(follow).WithStdout(true).WithStderr(true)
	res := make(chan error, 1)
	go func() { res <- containers.Logs(bctx, name, opts, outCh, errCh) }()
	// The service sends one frame per line; a frame without its newline
	// (a partial line) is written as it came.
	// A failed write is returned at the end: the stream is drained so that
	// the bindings' reader never blocks.
	var werr error
	write := func(w io.Writer, l string) {
		if _, err := io.WriteString(w, l); err != nil && werr == nil {
			werr = err
		}
	}
	for {
		select {
		case l := <-outCh:
			write(stdout, l)
		case l := <-errCh:
			write(stderr, l)
		case err := <-res:
			// Lines still queued were sent before the stream ended.
			for {
				select {
				case l := <-outCh:
					write(stdout, l)
				case l := <-errCh:
					write(stderr, l)
				default:
					if err == nil {
						err = werr
					}
					return err
				}
			}
		}
	}
}

func (c *Conn) ContainerExec(ctx context.Context, name string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	bctx, done := c.bind(ctx)
	defer done()
	cfg := new(handlers.ExecCreateConfig)
	cfg.Cmd = argv
	cfg.AttachStdin, cfg.AttachStdout, cfg.AttachStderr = true, true, true
	id, err := containers.ExecCreate(bctx, name, cfg)
	if err != nil {
		return -1, err
	}
	// The bindings stop copying stdin only at its end: the caller's reader
	// ends when the command should (a closed pipe).
	opts := new(containers.ExecStartAndAttachOptions).WithInputStream(*bufio.NewReader(stdin)).
		WithOutputStream(stdout).WithErrorStream(stderr).WithAttachInput(true).WithAttachOutput(true).WithAttachError(true)
	if err := containers.ExecStartAndAttach(bctx, id, opts); err != nil {
		return -1, err
	}
	// A fresh context: the exit code is asked for even when ctx ended the
	// stream (the command was then killed with its container, or lives on).
	ictx, idone := c.bind(nil)
	defer idone()
	st, err := containers.ExecInspect(ictx, id, nil)
	if err != nil {
		return -1, err
	}
	return st.ExitCode, nil
}

func (c *Conn) VolumeCreate(ctx context.Context, o types.VolumeCreateOptions) (*types.VolumeConfigResponse, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return volumes.Create(bctx, o, nil)
}

func (c *Conn) VolumeExists(ctx context.Context, name string) (bool, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return volumes.Exists(bctx, name, nil)
}

func (c *Conn) VolumeInspect(ctx context.Context, name string) (*types.VolumeConfigResponse, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return volumes.Inspect(bctx, name, nil)
}

func (c *Conn) VolumeList(ctx context.Context, filters map[string][]string) ([]*types.VolumeListReport, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return volumes.List(bctx, new(volumes.ListOptions).WithFilters(filters))
}

func (c *Conn) VolumeRemove(ctx context.Context, name string) error {
	bctx, done := c.bind(ctx)
	defer done()
	return volumes.Remove(bctx, name, nil)
}

func (c *Conn) ImageExists(ctx context.Context, name string) (bool, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return images.Exists(bctx, name, nil)
}

func (c *Conn) ImageGet(ctx context.Context, name string) (*types.ImageInspectReport, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return images.GetImage(bctx, name, nil)
}

func (c *Conn) ImageList(ctx context.Context, filters map[string][]string) ([]*types.ImageSummary, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return images.List(bctx, new(images.ListOptions).WithFilters(filters))
}

func (c *Conn) ImageBuild(ctx context.Context, containerFiles []string, o types.BuildOptions) (*types.BuildReport, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return images.Build(bctx, containerFiles, o)
}

func (c *Conn) ImagePull(ctx context.Context, name string, progress io.Writer) ([]string, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return images.Pull(bctx, name, new(images.PullOptions).WithProgressWriter(progress))
}

func (c *Conn) Info(ctx context.Context) (*define.Info, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return system.Info(bctx, nil)
}

func (c *Conn) DiskUsage(ctx context.Context) (*types.SystemDfReport, error) {
	bctx, done := c.bind(ctx)
	defer done()
	return system.DiskUsage(bctx, nil)
}

// ServiceVersion is c.Version, for the Engine interface.
func (c *Conn) ServiceVersion() semver.Version { return c.Version }
