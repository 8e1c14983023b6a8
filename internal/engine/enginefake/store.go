package enginefake

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/inspect"
	"github.com/containers/podman/v5/pkg/specgen"
)

type volume struct {
	name    string
	labels  map[string]string
	created time.Time
	files   map[string][]byte // "/path" in the volume -> content
}

type image struct {
	id      string
	tags    []string
	labels  map[string]string
	created time.Time
}

// AddImage makes an image exist under tags, with labels.
func (f *Fake) AddImage(labels map[string]string, tags ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addImageLocked(labels, tags...)
}

func (f *Fake) addImageLocked(labels map[string]string, tags ...string) {
	f.next++
	img := &image{id: fmt.Sprintf("%064x", 1<<40+f.next), tags: tags, labels: maps.Clone(labels), created: time.Now()}
	for _, t := range tags {
		f.images[t] = img
	}
}

// VolumeFiles is the content of volume name (path in it -> content).
func (f *Fake) VolumeFiles(name string) (map[string][]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.volumes[name]
	if !ok {
		return nil, false
	}
	return maps.Clone(v.files), true
}

// VolumeNames are the volumes that exist, sorted.
func (f *Fake) VolumeNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.volumes))
}

func (v *volume) report() *types.VolumeConfigResponse {
	return &types.VolumeConfigResponse{InspectVolumeData: define.InspectVolumeData{
		Name: v.name, Driver: "local", Mountpoint: "/fake/volumes/" + v.name + "/_data", CreatedAt: v.created, Labels: maps.Clone(v.labels),
	}}
}

func (f *Fake) VolumeCreate(ctx context.Context, o types.VolumeCreateOptions) (*types.VolumeConfigResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: VolumeCreate, Name: o.Name})
	if err != nil {
		return nil, f.end(i, err)
	}
	if _, ok := f.volumes[o.Name]; ok || o.Name == "" {
		return nil, f.end(i, conflict(fmt.Sprintf("volume with name %q already exists", o.Name)))
	}
	v := &volume{name: o.Name, labels: maps.Clone(o.Label), created: time.Now(), files: map[string][]byte{}}
	f.volumes[o.Name] = v
	return v.report(), f.end(i, nil)
}

func (f *Fake) VolumeExists(ctx context.Context, name string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: VolumeExists, Name: name})
	if err != nil {
		return false, f.end(i, err)
	}
	_, ok := f.volumes[name]
	return ok, f.end(i, nil)
}

// VolumeInspect looks the name up exactly (Podman's API does today).
func (f *Fake) VolumeInspect(ctx context.Context, name string) (*types.VolumeConfigResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: VolumeInspect, Name: name})
	if err != nil {
		return nil, f.end(i, err)
	}
	v, ok := f.volumes[name]
	if !ok {
		return nil, f.end(i, notFound("volume", name))
	}
	return v.report(), f.end(i, nil)
}

// VolumeList knows the "label" filter.
func (f *Fake) VolumeList(ctx context.Context, filters map[string][]string) ([]*types.VolumeListReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: VolumeList})
	if err != nil {
		return nil, f.end(i, err)
	}
	var out []*types.VolumeListReport
	for _, name := range slices.Sorted(maps.Keys(f.volumes)) {
		v := f.volumes[name]
		ok, err := matchFilters(filters, v.labels, nil)
		if err != nil {
			return nil, f.end(i, err)
		}
		if ok {
			out = append(out, &types.VolumeListReport{VolumeConfigResponse: *v.report()})
		}
	}
	return out, f.end(i, nil)
}

// VolumeRemove refuses, as Podman without force does, a volume that a
// container (of any state) mounts.
func (f *Fake) VolumeRemove(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: VolumeRemove, Name: name})
	if err != nil {
		return f.end(i, err)
	}
	if _, ok := f.volumes[name]; !ok {
		return f.end(i, notFound("volume", name))
	}
	for _, c := range f.containers {
		if slices.ContainsFunc(c.spec.Volumes, func(nv *specgen.NamedVolume) bool { return nv.Name == name }) {
			return f.end(i, conflict("volume "+name+" is being used by the following container(s): "+c.id))
		}
	}
	delete(f.volumes, name)
	return f.end(i, nil)
}

func (f *Fake) ImageExists(ctx context.Context, name string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: ImageExists, Name: name})
	if err != nil {
		return false, f.end(i, err)
	}
	_, ok := f.images[name]
	return ok, f.end(i, nil)
}

func (f *Fake) ImageGet(ctx context.Context, name string) (*types.ImageInspectReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: ImageGet, Name: name})
	if err != nil {
		return nil, f.end(i, err)
	}
	img, ok := f.images[name]
	if !ok {
		return nil, f.end(i, notFound("image", name))
	}
	return &types.ImageInspectReport{ImageData: &inspect.ImageData{ID: img.id, RepoTags: slices.Clone(img.tags), Created: &img.created}}, f.end(i, nil)
}

// ImageList knows the "label" filter.
func (f *Fake) ImageList(ctx context.Context, filters map[string][]string) ([]*types.ImageSummary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: ImageList})
	if err != nil {
		return nil, f.end(i, err)
	}
	seen := map[*image]bool{}
	var out []*types.ImageSummary
	for _, tag := range slices.Sorted(maps.Keys(f.images)) {
		img := f.images[tag]
		if seen[img] {
			continue
		}
		seen[img] = true
		ok, err := matchFilters(filters, img.labels, nil)
		if err != nil {
			return nil, f.end(i, err)
		}
		if ok {
			out = append(out, &types.ImageSummary{ID: img.id, RepoTags: slices.Clone(img.tags), Labels: maps.Clone(img.labels), Created: img.created.Unix(), Size: 1 << 20})
		}
	}
	return out, f.end(i, nil)
}

// ImageBuild makes o.Output exist, with o.Labels ("key=value"); it reads
// neither the context nor the Containerfiles, and writes no output.
func (f *Fake) ImageBuild(ctx context.Context, containerFiles []string, o types.BuildOptions) (*types.BuildReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: ImageBuild, Name: o.Output})
	if err != nil {
		return nil, f.end(i, err)
	}
	labels := map[string]string{}
	for _, l := range o.Labels {
		k, v, _ := strings.Cut(l, "=")
		labels[k] = v
	}
	f.addImageLocked(labels, o.Output)
	return &types.BuildReport{ID: f.images[o.Output].id}, f.end(i, nil)
}

// ImagePull makes name exist; it writes no progress.
func (f *Fake) ImagePull(ctx context.Context, name string, progress io.Writer) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: ImagePull, Name: name})
	if err != nil {
		return nil, f.end(i, err)
	}
	if _, ok := f.images[name]; !ok {
		f.addImageLocked(nil, name)
	}
	return []string{f.images[name].id}, f.end(i, nil)
}

// Info is f.HostInfo and the version.
func (f *Fake) Info(ctx context.Context) (*define.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: Info})
	if err != nil {
		return nil, f.end(i, err)
	}
	host := f.HostInfo
	return &define.Info{Host: &host, Version: define.Version{Version: f.Version.String()}}, f.end(i, nil)
}

// DiskUsage counts a volume's size as the bytes of its files.
func (f *Fake) DiskUsage(ctx context.Context) (*types.SystemDfReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: DiskUsage})
	if err != nil {
		return nil, f.end(i, err)
	}
	df := &types.SystemDfReport{}
	for _, name := range slices.Sorted(maps.Keys(f.volumes)) {
		var size int64
		for _, b := range f.volumes[name].files {
			size += int64(len(b))
		}
		df.Volumes = append(df.Volumes, &types.SystemDfVolumeReport{VolumeName: name, Size: size})
	}
	return df, f.end(i, nil)
}
