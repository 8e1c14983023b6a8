package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/aisb-dev/aisb/internal/engine"
)

// File is one file handed to the sandbox through Podman's API (an archive
// copy into the created container), not through a bind mount: it works the
// same with a remote Podman, and the host file is never exposed.
type File struct {
	Path    string // absolute, inside the container
	Mode    int64  // permission bits
	Content []byte
	Dir     bool // a directory (no content), written before what it holds
}

// copyFiles writes files into the created, not yet started, container. They
// belong to root; parent directories must exist in the image.
func copyFiles(c engine.Engine, name string, files []File) error {
	if len(files) == 0 {
		return nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		clean := path.Clean(f.Path)
		if !path.IsAbs(f.Path) || clean != f.Path || clean == "/" {
			return fmt.Errorf("sandbox file %q: want a clean absolute path", f.Path)
		}
		hdr := &tar.Header{
			Name: strings.TrimPrefix(clean, "/"), Mode: f.Mode & 0o777, Size: int64(len(f.Content)),
			Typeflag: tar.TypeReg, ModTime: time.Now(), Format: tar.FormatPAX,
		}
		if f.Dir {
			hdr.Typeflag, hdr.Name, hdr.Size = tar.TypeDir, hdr.Name+"/", 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("sandbox file %s: %w", f.Path, err)
		}
		if _, err := tw.Write(f.Content); err != nil {
			return fmt.Errorf("sandbox file %s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("sandbox files: %w", err)
	}
	if err := c.ContainerCopyIn(context.TODO(), name, "/", &buf, engine.CopyOptions{Chown: true}); err != nil {
		return fmt.Errorf("copy files into the sandbox: %w", err)
	}
	return nil
}
