package sandbox

import (
	"context"
	"fmt"

	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/aisb-dev/aisb/internal/engine"
)

// Overlay mounts the project copy-on-write (Podman's `:O` volume): the
// agent's writes, deletions and chmods land in Upper, the project is only
// read. Upper and Work must be on one filesystem and Work empty.
type Overlay struct {
	Upper, Work string
}

func (ov *Overlay) volume(project string) *specgen.OverlayVolume {
	return &specgen.OverlayVolume{
		Source: project, Destination: "/project",
		Options: []string{"O", "upperdir=" + ov.Upper, "workdir=" + ov.Work},
	}
}

// Scrub empties dir, which holds files of a subordinate uid (overlay leaves
// a directory of mode 0 in its work directory that the host user cannot
// open), from a throwaway container in the user's default user namespace:
// root there maps to the host user and may remove them. The host user then
// removes dir itself. No network, two capabilities, nothing else mounted.
func Scrub(c engine.Engine, image, dir, session, owner string) error {
	s := specgen.NewSpecGenerator(image, false)
	s.Name = "aisb-scrub-" + session
	s.Entrypoint = []string{"find", "/scrub", "-mindepth", "1", "-delete"}
	s.Command = []string{}
	s.User = "0:0"
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	s.CapDrop = []string{"ALL"}
	s.CapAdd = []string{"DAC_OVERRIDE", "DAC_READ_SEARCH"}
	s.NoNewPrivileges = ptr(true)
	s.Mounts = []spec.Mount{{Type: "bind", Source: dir, Destination: "/scrub", Options: []string{"rw"}}}
	s.Labels = map[string]string{engine.LabelKind: "scrub", engine.LabelSession: session, engine.LabelOwner: owner}
	engine.Remove(context.TODO(), c, s.Name)
	if _, err := c.ContainerCreate(context.TODO(), s); err != nil {
		return fmt.Errorf("scrub %s: create: %w", dir, err)
	}
	defer engine.Remove(context.TODO(), c, s.Name)
	if err := c.ContainerStart(context.TODO(), s.Name); err != nil {
		return fmt.Errorf("scrub %s: start: %w", dir, err)
	}
	code, err := c.ContainerWait(context.TODO(), s.Name)
	if err != nil {
		return fmt.Errorf("scrub %s: %w", dir, err)
	}
	if code != 0 {
		return fmt.Errorf("scrub %s: find exited %d", dir, code)
	}
	return nil
}
