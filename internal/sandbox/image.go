package sandbox

import (
	"fmt"
	"strings"

	aisb "github.com/aisb-dev/aisb"
	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/image"
)

// ImageSpec is the sandbox image for a harness on a base.
func ImageSpec(base string, h harness.Preset, entrypoint image.File) image.Spec {
	return image.Spec{
		Name:          "aisb-sandbox-" + h.Name,
		Containerfile: aisb.Containerfile,
		Files:         map[string]image.File{"aisb-entrypoint": entrypoint},
		BaseImage:     base,
		// HARNESS_BIN is what the build checks is there before it tags.
		Args:   map[string]string{"HARNESS_NPM": h.NPM, "STATE_DIRS": strings.Join(h.State.Dirs, " "), "HARNESS_BIN": harnessBin(h)},
		UserNS: userNS,
	}
}

// harnessBin is the program the harness's command runs.
func harnessBin(h harness.Preset) string {
	if len(h.Command) == 0 {
		return ""
	}
	return h.Command[0]
}

// userNS is the sandbox's user namespace: root inside is the entrypoint's,
// for its first moments; the agent's uid 1000 is the host user.
var userNS = fmt.Sprintf("keep-id:uid=%d,gid=%d", contract.AgentUID, contract.AgentGID)
