package session

import (
	"fmt"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/reaper"
	"github.com/aisb-dev/aisb/internal/sandbox"
)

// images are the session's image tags.
type images struct {
	sandbox string
	gate    string // "" when the session starts no gate of its own
}

// hashImages hashes the inputs of the session's images (the sandbox's hold
// the entrypoint binary, at entrypoint) in the background.
func hashImages(o Options, h harness.Preset, entrypoint string) func() ([]image.Hashed, error) {
	type result struct {
		specs []image.Hashed
		err   error
	}
	done := make(chan result, 1)
	go func() {
		ep, err := image.Digest(entrypoint, o.Paths.DigestDir())
		if err != nil {
			done <- result{err: fmt.Errorf("read aisb-entrypoint: %w", err)}
			return
		}
		base := o.Config.Config.Sandbox.BaseImage
		specs := []image.Hashed{sandbox.ImageSpec(base, h, ep).Hash()}
		if ownGate(o) {
			specs = append(specs, gate.ImageSpec(base).Hash())
		}
		done <- result{specs: specs}
	}()
	return func() ([]image.Hashed, error) {
		r := <-done
		return r.specs, r.err
	}
}

// ensureImages builds (once) the sandbox image for the harness and the
// gate image the session needs.
func ensureImages(c engine.Engine, o Options, hashed func() ([]image.Hashed, error)) (images, error) {
	specs, err := hashed()
	if err != nil {
		return images{}, err
	}
	tags, err := image.EnsureAll(c, image.Build{LockDir: o.Paths.LockDir(), Output: o.builds(), Logf: o.Logf}, specs...)
	if err != nil {
		return images{}, err
	}
	imgs := images{sandbox: tags[0]}
	if len(tags) > 1 {
		imgs.gate = tags[1]
	}
	return imgs, nil
}

// builds is where image builds show their progress.
func (o Options) builds() image.Output {
	b := o.Builds
	if b.W == nil {
		b = image.Output{W: o.Stderr}
	}
	return b
}

// podmanPrep is what Podman does for a session before it creates anything:
// the network helper's detection, the images' check (and builds) and the
// sweep of dead sessions' containers, all in the background.
type podmanPrep struct {
	done   chan struct{}
	helper string
	imgs   images
	err    error
}

// preparePodman starts the session's Podman preparations; wait returns
// their results (and may be called again: a deferred call makes sure
// nothing still uses the connection when the session returns early).
func preparePodman(c engine.Engine, o Options, specs func() ([]image.Hashed, error), sweep bool) *podmanPrep {
	p := &podmanPrep{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		reaped := make(chan struct{})
		go func() {
			if sweep {
				reaper.Reap(c, o.Logf)
			}
			close(reaped)
		}()
		p.helper, p.err = sandbox.Helper(c, o.Helper)
		if p.err == nil {
			p.imgs, p.err = ensureImages(c, o, specs)
		}
		<-reaped
	}()
	return p
}

func (p *podmanPrep) wait() (helper string, imgs images, err error) {
	<-p.done
	return p.helper, p.imgs, p.err
}
