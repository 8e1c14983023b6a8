package sandbox

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
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

// FindEntrypoint returns the aisb-entrypoint binary: override when set
// ($AISB_ENTRYPOINT), else next to the running aisb (where both make and go
// install put it). It must be static: it runs first in any image.
func FindEntrypoint(override string) (string, error) {
	if override != "" {
		return override, checkStatic(override)
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find aisb-entrypoint: %w", err)
	}
	p := filepath.Join(filepath.Dir(self), "aisb-entrypoint")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("find aisb-entrypoint: not next to aisb at %s; build both with make, or go install ./cmd/... (or set AISB_ENTRYPOINT)", p)
	}
	return p, checkStatic(p)
}

func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("aisb-entrypoint at %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("aisb-entrypoint at %s is dynamically linked; build it with CGO_ENABLED=0", p)
		}
	}
	return nil
}
