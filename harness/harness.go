// Package harness lists the coding agents aisb knows how to start, with the
// hosts each must reach and the environment names each reads.
package harness

import (
	"fmt"
	"sort"
	"strings"

	"github.com/aisb-dev/aisb/allowlist"
)

// Preset is one harness: what to run, what to install, what it needs.
type Preset struct {
	Name    string
	Command []string // argv run when aisb run has no COMMAND
	NPM     string   // npm package@version installed into the image; empty for none
	Hosts   []string // allowlist entries the harness needs to work at all
	Env     []string // environment names it reads (passed only when set on the host)
}

var presets = map[string]Preset{
	"pi": {
		Name: "pi", Command: []string{"pi"},
		NPM:   "@mariozechner/pi-coding-agent@0.73.1",
		Hosts: []string{"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"},
		Env:   []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"},
	},
	"claude": {
		Name: "claude", Command: []string{"claude"},
		NPM:   "@anthropic-ai/claude-code@2.1.328",
		Hosts: []string{"api.anthropic.com", "statsig.anthropic.com"},
		Env:   []string{"ANTHROPIC_API_KEY"},
	},
	"codex": {
		Name: "codex", Command: []string{"codex"},
		NPM:   "@openai/codex@0.169.0",
		Hosts: []string{"api.openai.com", "chatgpt.com"},
		Env:   []string{"OPENAI_API_KEY"},
	},
	"opencode": {
		Name: "opencode", Command: []string{"opencode"},
		NPM:   "opencode-ai@1.18.33",
		Hosts: []string{"api.anthropic.com", "api.openai.com", "opencode.ai", "models.dev"},
		Env:   []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY"},
	},
	"shell": {Name: "shell", Command: []string{"bash"}},
}

// AllowedHosts are the preset's hosts as allowlist entries.
func (p Preset) AllowedHosts() ([]allowlist.Host, error) {
	hosts, errs := allowlist.Parse(p.Hosts)
	if len(errs) > 0 {
		return nil, fmt.Errorf("harness %s: host %v", p.Name, errs[0])
	}
	return hosts, nil
}

// Lookup returns the preset called name.
func Lookup(name string) (Preset, error) {
	p, ok := presets[name]
	if !ok {
		return Preset{}, fmt.Errorf("unknown harness %q; choose one of %s", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// Names lists the known harnesses, sorted.
func Names() []string {
	var names []string
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
