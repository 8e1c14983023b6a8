// Package image builds aisb's images from embedded Containerfiles, tagged by
// a hash of everything that went into them, so the same inputs never rebuild.
package image

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containers/buildah/define"
	"github.com/containers/podman/v5/pkg/domain/entities/types"

	"github.com/aisb-dev/aisb/internal/engine"
)

// Spec says what to build.
type Spec struct {
	Name          string            // repository under localhost/, e.g. "aisb-gate"
	Containerfile []byte            // built with ARG BASE_IMAGE
	Files         map[string]File   // more files in the build context, by name there
	BaseImage     string            // passed as BASE_IMAGE
	Args          map[string]string // more build arguments
	// UserNS is the user namespace the image's containers run in
	// (specgen's form, "keep-id:uid=1000,gid=1000"): the build ends by
	// having Podman prepare the image for it (prepare). Not an input of the
	// image: the tag does not say it.
	UserNS string
}

// Build says where a build may lock and report.
type Build struct {
	LockDir string                           // the user's own lock directory (state.Paths.LockDir)
	Output  Output                           // where a build or pull shows its progress
	Logf    func(format string, args ...any) // aisb's notices; nil: none
}

func (b Build) logf(format string, args ...any) {
	if b.Logf != nil {
		b.Logf(format, args...)
	}
}

// Label on every image aisb builds, holding the inputs hash.
const Label = "io.aisb.inputs"

// Tag computes the image's tag from the Containerfile, the context files, the
// base image's ID and the extra inputs; baseID must be the resolved ID.
func (s Spec) Tag(baseID string) string { return s.Hash().Tag(baseID) }

// Hashed is a Spec with its Containerfile and files' digests already
// hashed: the part of its tag that does not depend on Podman.
type Hashed struct {
	Spec  Spec
	state []byte // the hash so far (encoding.BinaryMarshaler)
}

// Hash hashes the inputs that do not depend on the base image.
func (s Spec) Hash() Hashed {
	h := sha256.New()
	fmt.Fprintf(h, "containerfile %d\n", len(s.Containerfile))
	h.Write(s.Containerfile)
	names := make([]string, 0, len(s.Files))
	for n := range s.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := s.Files[n]
		fmt.Fprintf(h, "file %s %d %x\n", n, f.Size, f.Sum)
	}
	st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic(err) // crypto/sha256 always marshals
	}
	return Hashed{Spec: s, state: st}
}

// Tag is Spec.Tag from the hash so far.
func (hs Hashed) Tag(baseID string) string {
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(hs.state); err != nil {
		panic(err) // a state Hash wrote
	}
	fmt.Fprintf(h, "base %s\n", baseID)
	args := make([]string, 0, len(hs.Spec.Args))
	for k := range hs.Spec.Args {
		args = append(args, k)
	}
	sort.Strings(args)
	for _, k := range args {
		fmt.Fprintf(h, "arg %s %d %s\n", k, len(hs.Spec.Args[k]), hs.Spec.Args[k])
	}
	return "localhost/" + hs.Spec.Name + ":" + hex.EncodeToString(h.Sum(nil))[:16]
}

// BaseID resolves the base image to its ID, pulling it when it is missing.
func BaseID(c engine.Engine, base string, b Build) (string, error) {
	data, err := c.ImageGet(context.TODO(), base)
	if engine.IsNotFound(err) {
		p := newProgress(b.Output, "pulling "+base, "pulled "+base, everyLine, time.Now)
		p.startTicker(time.Second)
		_, perr := c.ImagePull(context.TODO(), base, p)
		p.finish(perr)
		if perr != nil {
			return "", fmt.Errorf("pull base image %s: %w (where no registry is reachable, set sandbox.base_image or AISB_BASE_IMAGE to a local image)", base, perr)
		}
		data, err = c.ImageGet(context.TODO(), base)
	}
	if err != nil {
		return "", fmt.Errorf("inspect base image %s: %w", base, err)
	}
	return data.ID, nil
}

// Ensure returns the tag of the image for spec, building it only when no
// image with that tag exists. built says whether it built.
func Ensure(c engine.Engine, s Spec, b Build) (tag string, built bool, err error) {
	baseID, err := BaseID(c, s.BaseImage, b)
	if err != nil {
		return "", false, err
	}
	tag = s.Tag(baseID)
	if ok, err := exists(c, tag); err != nil || ok {
		return tag, false, err
	}
	return build(c, s, tag, b)
}

// EnsureAll is Ensure for several images at once, hashed beforehand: each
// base image is looked up once and the tags are checked side by side; the
// builds, if any, run one after another. The tags come in the order given.
func EnsureAll(c engine.Engine, b Build, specs ...Hashed) ([]string, error) {
	bases := map[string]string{}
	for _, s := range specs {
		if _, ok := bases[s.Spec.BaseImage]; ok {
			continue
		}
		id, err := BaseID(c, s.Spec.BaseImage, b)
		if err != nil {
			return nil, err
		}
		bases[s.Spec.BaseImage] = id
	}
	tags := make([]string, len(specs))
	found := make([]bool, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		tags[i] = s.Tag(bases[s.Spec.BaseImage])
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = exists(c, tags[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, s := range specs {
		if !found[i] {
			if _, _, err := build(c, s.Spec, tags[i], b); err != nil {
				return nil, err
			}
		}
	}
	return tags, nil
}

func exists(c engine.Engine, tag string) (bool, error) {
	ok, err := c.ImageExists(context.TODO(), tag)
	if err != nil {
		return false, fmt.Errorf("look up image %s: %w", tag, err)
	}
	return ok, nil
}

// build builds s as tag unless, once the build lock is held, it exists.
func build(c engine.Engine, s Spec, tag string, b Build) (string, bool, error) {
	// Sessions started together build once: the others wait, then find it.
	unlock, err := lock(b.LockDir, s.Name)
	if err != nil {
		// Building unlocked is still correct, only slower when another
		// session builds the same image at the same time.
		b.logf("building without a lock: %v", err)
	} else {
		defer unlock()
	}
	if ok, err := exists(c, tag); err != nil || ok {
		return tag, false, err
	}
	b.logf("building %s on %s", tag, s.BaseImage)
	dir, err := os.MkdirTemp("", "aisb-build-")
	if err != nil {
		return "", false, fmt.Errorf("build %s: %w", s.Name, err)
	}
	defer os.RemoveAll(dir)
	if err := writeContext(dir, s); err != nil {
		return "", false, fmt.Errorf("build %s: %w", s.Name, err)
	}
	args := map[string]string{"BASE_IMAGE": s.BaseImage}
	for k, v := range s.Args {
		args[k] = v
	}
	p := newProgress(b.Output, "building "+s.Name, "built "+s.Name, buildSteps, time.Now)
	opts := types.BuildOptions{BuildOptions: define.BuildOptions{
		ContextDirectory:       dir,
		Args:                   args,
		Output:                 tag,
		Labels:                 []string{Label + "=" + tag},
		Out:                    p,
		Err:                    p,
		ReportWriter:           p,
		PullPolicy:             define.PullIfMissing,
		Layers:                 true,
		RemoveIntermediateCtrs: true,
		// A failed build leaves no container behind in the user's storage.
		ForceRmIntermediateCtrs: true,
	}}
	p.startTicker(time.Second)
	_, err = c.ImageBuild(context.TODO(), []string{filepath.Join(dir, "Containerfile")}, opts)
	p.finish(err)
	if err != nil {
		return "", false, fmt.Errorf("build %s: %w", tag, err)
	}
	prepare(c, s, tag, b)
	return tag, true, nil
}

// writeContext writes the build context of s into dir: executables (ELF)
// 0755, the rest 0644, whatever the user's umask. The image keeps these
// modes (COPY), and its tag says nothing of them: under a umask of 077 the
// sandbox's entrypoint came out 0700, which the agent could not run (as an
// ssh ProxyCommand, say).
func writeContext(dir string, s Spec) error {
	files := map[string][]byte{"Containerfile": s.Containerfile}
	for n, f := range s.Files {
		b, err := f.content()
		if err != nil {
			return err
		}
		files[n] = b
	}
	for n, b := range files {
		mode := os.FileMode(0o644)
		if len(b) > 4 && string(b[1:4]) == "ELF" {
			mode = 0o755
		}
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, b, mode); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
	}
	return nil
}

// lock takes an exclusive lock per image name in dir (the user's runtime
// directory: never a shared one such as /tmp, where another user could hold
// it), so concurrent sessions do not build the same image side by side.
func lock(dir, name string) (unlock func(), err error) {
	if dir == "" {
		return nil, errors.New("no lock directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "build-"+name+".lock"), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// Listed is one image aisb built.
type Listed struct {
	Tag     string    `json:"tag"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size"`
}

// List lists the images aisb built (by their label).
func List(c engine.Engine) ([]Listed, error) {
	list, err := c.ImageList(context.TODO(), map[string][]string{"label": {Label}})
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var out []Listed
	for _, img := range list {
		for _, tag := range img.RepoTags {
			if strings.HasPrefix(tag, "localhost/aisb-") {
				out = append(out, Listed{Tag: tag, Created: time.Unix(img.Created, 0), Size: img.Size})
			}
		}
	}
	return out, nil
}
