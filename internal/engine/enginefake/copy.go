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
	"strings"

	"github.com/aisb-dev/aisb/internal/engine"
)

// filesAt is where path p of container c lives: a named volume (or its
// SubPath) mounted over it, else the container's own files; key is p's key
// there.
func (f *Fake) filesAt(c *container, p string) (files map[string][]byte, key string) {
	for _, nv := range c.spec.Volumes {
		if v, ok := f.volumes[nv.Name]; ok && (p == nv.Dest || strings.HasPrefix(p, strings.TrimSuffix(nv.Dest, "/")+"/")) {
			return v.files, path.Join("/", nv.SubPath, strings.TrimPrefix(p, nv.Dest))
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

// WriteFile writes content at p in the container name, as its process
// would: into a named volume mounted there, else into the container.
func (f *Fake) WriteFile(name, p string, content []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.find(name)
	if !ok {
		return fmt.Errorf("enginefake: write %s: no container %s", p, name)
	}
	files, key := f.filesAt(c, path.Clean(p))
	files[key] = bytes.Clone(content)
	return nil
}

// ContainerLogs writes what the container's attach writes (its stdout
// and stderr, set for it) and returns: the fake runs no process whose
// output it could follow.
func (f *Fake) ContainerLogs(ctx context.Context, name string, follow bool, stdout, stderr io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, i, err := f.beginContainer(ctx, ContainerLogs, name, "")
	if err != nil {
		return f.end(i, err)
	}
	stdout.Write(c.stdout)
	stderr.Write(c.stderr)
	return f.end(i, nil)
}

// ErrNoExec is ContainerExec's error when f.Exec is not set.
var ErrNoExec = errors.New("enginefake: exec runs no process (set Fake.Exec)")

// ContainerExec runs f.Exec for a running container, recorded with the
// command's first word.
func (f *Fake) ContainerExec(ctx context.Context, name string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	f.mu.Lock()
	arg := ""
	if len(argv) > 0 {
		arg = argv[0]
	}
	c, i, err := f.beginContainer(ctx, ContainerExec, name, arg)
	if err == nil && c.state != StateRunning {
		err = conflict("container " + name + " is not running")
	}
	if err == nil && f.Exec == nil {
		err = ErrNoExec
	}
	run := f.Exec
	f.end(i, err)
	f.mu.Unlock()
	if err != nil {
		return -1, err
	}
	return run(ctx, name, argv, stdin, stdout, stderr)
}
