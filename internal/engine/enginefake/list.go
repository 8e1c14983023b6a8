package enginefake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/specgen"
)

// ContainerList knows the filters aisb uses: "label" (key or key=value)
// and "volume" (a named volume's name).
func (f *Fake) ContainerList(ctx context.Context, filters map[string][]string) ([]types.ListContainer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.begin(ctx, Call{Method: ContainerList})
	if err != nil {
		return nil, f.end(i, err)
	}
	var out []types.ListContainer
	for _, name := range slices.Sorted(maps.Keys(f.containers)) {
		c := f.containers[name]
		ok, err := matchFilters(filters, c.spec.Labels, func(v string) bool {
			return slices.ContainsFunc(c.spec.Volumes, func(nv *specgen.NamedVolume) bool { return nv.Name == v })
		})
		if err != nil {
			return nil, f.end(i, err)
		}
		if ok {
			out = append(out, types.ListContainer{ID: c.id, Names: []string{c.name}, Image: c.spec.Image, Labels: maps.Clone(c.spec.Labels),
				State: c.state, Exited: c.state == StateExited, ExitCode: c.code})
		}
	}
	return out, f.end(i, nil)
}

// matchFilters applies Podman's filters: each key's values any, all keys
// (a "label" filter: all of its values); volume answers the "volume" key.
func matchFilters(filters map[string][]string, labels map[string]string, volume func(string) bool) (bool, error) {
	for key, values := range filters {
		switch key {
		case "label":
			for _, v := range values {
				k, val, hasVal := strings.Cut(v, "=")
				got, ok := labels[k]
				if !ok || hasVal && got != val {
					return false, nil
				}
			}
		case "volume":
			if volume == nil || !slices.ContainsFunc(values, volume) {
				return false, nil
			}
		default:
			return false, fmt.Errorf("enginefake: filter %q is not supported", key)
		}
	}
	return true, nil
}
