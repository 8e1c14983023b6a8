package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/state"
)

// prepare creates, and removes, a container of the image just built in the
// user namespace its containers run in (s.UserNS), as a step of the build.
//
// Rootless Podman gives a container whose ids are mapped otherwise than its
// storage's (keep-id) a copy of the whole image with its files' owners
// shifted, made when the first such container is created and kept for the
// next ones: measured on a 2-core VM, the first create of a fresh 620 MB
// image took 14.8 s, the next run 0.45 s (26 s for the pi image). Made
// here, that wait is a step of the build with its own progress line, not a
// silent pause in the first session after each build (the gate's
// readiness check once gave up during it). It is done at most once per
// image: a build happens only for a new tag.
//
// A failure is reported, not returned: the image is good, and its first
// session pays the wait as before.
func prepare(c engine.Engine, s Spec, tag string, b Build) {
	if s.UserNS == "" {
		return
	}
	p := newProgress(b.Output, "preparing "+s.Name+" for its containers' user ids (once per build)", "prepared "+s.Name+" for its containers' user ids", everyLine, time.Now)
	p.startTicker(time.Second)
	err := createAndRemove(c, tag, s.UserNS)
	p.finish(err)
	if err != nil {
		b.logf("preparing %s: %v (its first session will take longer)", tag, err)
	}
}

// createAndRemove creates a container of image in userns, never started,
// and removes it. It carries this process as its owner, so that if aisb is
// killed meanwhile the next sweep removes it (reaper.Reap).
func createAndRemove(c engine.Engine, image, userns string) error {
	ns, err := specgen.ParseUserNamespace(userns)
	if err != nil {
		return err
	}
	b := make([]byte, 4)
	rand.Read(b)
	s := specgen.NewSpecGenerator(image, false)
	s.Name = "aisb-prepare-" + hex.EncodeToString(b)
	s.Command = []string{"true"}
	s.UserNS = ns
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	s.ImageVolumeMode = "ignore" // a base image's VOLUMEs: no anonymous volume left behind
	s.Labels = map[string]string{engine.LabelKind: "prepare", engine.LabelOwner: state.Owner()}
	if _, err := c.ContainerCreate(context.TODO(), s); err != nil {
		return fmt.Errorf("create %s: %w", s.Name, err)
	}
	return engine.Remove(context.TODO(), c, s.Name)
}
