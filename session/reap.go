package session

import (
	"fmt"

	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/aisb-dev/aisb/engine"
	"github.com/aisb-dev/aisb/gate"
)

// listOwned maps the names of aisb's session containers to their owners.
func listOwned(c *engine.Conn) (map[string]string, error) {
	list, err := containers.List(c.Ctx, new(containers.ListOptions).WithAll(true).
		WithFilters(map[string][]string{"label": {gate.LabelOwner}}))
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := map[string]string{}
	for _, ctr := range list {
		if len(ctr.Names) > 0 {
			out[ctr.Names[0]] = ctr.Labels[gate.LabelOwner]
		}
	}
	return out, nil
}
