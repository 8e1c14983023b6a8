package statevol

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/state"
)

// ioMount is where the whole volume appears in an io container.
const ioMount = "/state"

// withVolume runs fn with a container that has the volume at ioMount and is
// never started: files go in and out through its archive API. (Podman
// 5.4's service has no volume import/export endpoint; the archive API of a
// created container reads and writes its volumes, measured.) It runs as the
// agent in a keep-id user namespace, so what is copied in is the agent's.
func withVolume(c engine.Engine, volume, img string, fn func(ctr string) error) error {
	b := make([]byte, 4)
	rand.Read(b)
	s := specgen.NewSpecGenerator(img, false)
	s.Name = "aisb-state-io-" + hex.EncodeToString(b)
	s.Entrypoint = []string{"/nonexistent"} // never started
	s.User = fmt.Sprintf("%d:%d", contract.AgentUID, contract.AgentGID)
	userns, err := specgen.ParseUserNamespace(fmt.Sprintf("keep-id:uid=%d,gid=%d", contract.AgentUID, contract.AgentGID))
	if err != nil {
		return err
	}
	s.UserNS = userns
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	s.Volumes = []*specgen.NamedVolume{{Name: volume, Dest: ioMount, Options: []string{"rw", "nosuid", "nodev"}}}
	// The reaper removes it by its owner should aisb die before it does.
	s.Labels = map[string]string{engine.LabelKind: "state-io", engine.LabelOwner: state.Owner()}
	if _, err := c.ContainerCreate(context.TODO(), s); err != nil {
		return fmt.Errorf("state volume %s: create a container to reach it: %w", volume, err)
	}
	defer c.ContainerRemove(context.TODO(), s.Name, engine.RemoveOptions{Force: true, Ignore: true})
	return fn(s.Name)
}

// copyIn extracts a tar into the volume; its entries end up the agent's.
func copyIn(c engine.Engine, volume, img string, tarball io.Reader) error {
	return withVolume(c, volume, img, func(ctr string) error {
		if err := c.ContainerCopyIn(context.TODO(), ctr, ioMount, tarball, engine.CopyOptions{}); err != nil {
			return fmt.Errorf("copy into state volume %s: %w", volume, err)
		}
		return nil
	})
}

// copyOut writes the volume's content as a tar to w.
func copyOut(c engine.Engine, volume, img string, w io.Writer) error {
	return withVolume(c, volume, img, func(ctr string) error {
		if err := c.ContainerCopyOut(context.TODO(), ctr, ioMount+"/.", w); err != nil {
			return fmt.Errorf("copy out of state volume %s: %w", volume, err)
		}
		return nil
	})
}

// ErrNoImage is returned when no aisb image exists to reach a volume through.
var ErrNoImage = fmt.Errorf("no aisb image exists yet to reach the volume through; run aisb image build")

// AnyImage is an image aisb built, preferring the harness's sandbox image:
// an io container needs one, though it never runs it.
func AnyImage(c engine.Engine, harness string) (string, error) {
	list, err := c.ImageList(context.TODO(), map[string][]string{"label": {image.Label}})
	if err != nil {
		return "", fmt.Errorf("list images: %w", err)
	}
	best := ""
	for _, img := range list {
		for _, tag := range img.RepoTags {
			if strings.HasPrefix(tag, "localhost/aisb-sandbox-"+harness+":") {
				return tag, nil
			}
			if best == "" && strings.HasPrefix(tag, "localhost/aisb-") {
				best = tag
			}
		}
	}
	if best == "" {
		return "", ErrNoImage
	}
	return best, nil
}

// tarName is a path from an exported tar, relative to the volume's root.
func tarName(name string) string {
	name = strings.TrimPrefix(name, "./")
	name = strings.TrimLeft(name, "/")
	return strings.TrimSuffix(name, "/")
}
