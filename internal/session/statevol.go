package session

import (
	"strings"

	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/statevol"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

// openState mounts the harness's state volume for the session's scope and
// points the harness at it through env; closeState records which settings
// files the session changed and says so on stderr.
func openState(c engine.Engine, o Options, h harness.Preset, img string, env map[string]string) ([]*specgen.NamedVolume, func(), error) {
	scope := o.Config.Config.Sandbox.State
	if scope == config.StateNone || scope == "" || len(h.State.Dirs) == 0 {
		return nil, func() {}, nil
	}
	s, err := statevol.Open(c, statevol.Target{Harness: h, Scope: scope, Project: o.ProjectDir}, o.Paths.VolumeDir(), img)
	if err != nil {
		return nil, nil, err
	}
	s.Env(env)
	return s.Mounts(), func() {
		changed, err := s.Close()
		if err != nil {
			o.Logf("state volume %s: %v", s.Name(), err)
			return
		}
		if len(changed) > 0 {
			o.Logf("this session changed %s settings kept in %s: %s; later sessions of this scope use them (aisb run --fresh does not)",
				h.Name, s.Name(), strings.Join(quoteAll(changed), ", "))
		}
	}, nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = termsafe.Quote(s)
	}
	return out
}
