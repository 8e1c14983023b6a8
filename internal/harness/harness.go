// Package harness lists the coding agents aisb knows how to start, with the
// hosts each must reach and the environment names each reads.
package harness

import (
	"fmt"
	"sort"
	"strings"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

// Preset is one harness: what to run, what to install, what it needs.
type Preset struct {
	Name    string
	Command []string // argv run when aisb run has no COMMAND
	NPM     string   // npm package@version installed into the image; empty for none
	Hosts   []string // allowlist entries the harness needs to work at all
	Env     []string // environment names it reads (passed only when set on the host)
	State   State    // where it keeps its settings, login and sessions
	// Credentials are the keys it reads and where they go, so that a key
	// named with --credential stays on the host and the gate sets it.
	Credentials []Credential
}

// State says where a harness keeps what should outlive one sandbox. Every
// path is relative to the home, in the sandbox (/home/agent) as in the state
// volume, whose layout mirrors the home: the volume's subdirectory Dirs[i] is
// mounted at /home/agent/Dirs[i].
type State struct {
	Dirs []string
	// Env points the harness at Dirs where its default lies elsewhere.
	Env map[string]string
	// Settings change what the harness does in later sessions (approvals,
	// hooks, extensions, instructions): `aisb state ls` says when they
	// changed. A path ending in "/" is a directory and all below it.
	Settings []string
	// Credentials are never imported from the host without --with-credentials.
	Credentials []string
	// HostPaths maps a path in the volume to where it lies in the host's
	// home when that differs (Claude Code's ~/.claude.json).
	HostPaths map[string]string
}

// Credential is where one API key goes: the header of one host, with the
// variable's value after Prefix.
type Credential struct {
	Env    string
	Host   string
	Header string
	Prefix string
}

// The providers' own key headers.
var (
	anthropicKey = Credential{Env: "ANTHROPIC_API_KEY", Host: "api.anthropic.com", Header: "x-api-key"}
	openaiKey    = Credential{Env: "OPENAI_API_KEY", Host: "api.openai.com", Header: "authorization", Prefix: "Bearer "}
	geminiKey    = Credential{Env: "GEMINI_API_KEY", Host: "generativelanguage.googleapis.com", Header: "x-goog-api-key"}
)

// KnownCredential is where the variable env goes for any preset, if one knows.
func KnownCredential(env string) (Credential, bool) {
	for _, c := range []Credential{anthropicKey, openaiKey, geminiKey} {
		if c.Env == env {
			return c, true
		}
	}
	return Credential{}, false
}

var presets = map[string]Preset{
	"pi": {
		Name: "pi", Command: []string{"pi"},
		NPM:         "@mariozechner/pi-coding-agent@0.73.1",
		Hosts:       []string{"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"},
		Env:         []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"},
		Credentials: []Credential{anthropicKey, openaiKey, geminiKey},
		// Checked in the 0.73.1 npm package, dist/config.js: getAgentDir()
		// is $PI_CODING_AGENT_DIR, else ~/.pi/agent (package.json piConfig
		// configDir ".pi"); auth.json, settings.json, models.json,
		// sessions/, extensions/, themes/, prompts/, tools/ live there.
		State: State{
			Dirs: []string{".pi"},
			Settings: []string{".pi/agent/settings.json", ".pi/agent/models.json", ".pi/agent/keybindings.json",
				".pi/agent/AGENTS.md", ".pi/agent/SYSTEM.md", ".pi/agent/extensions/", ".pi/agent/themes/",
				".pi/agent/prompts/", ".pi/agent/tools/", ".pi/agent/skills/"},
			Credentials: []string{".pi/agent/auth.json"},
			// Login (/login), read in the 0.73.1 package: Anthropic's OAuth
			// exchanges its code at platform.claude.com, ChatGPT's at
			// auth.openai.com; neither is allowed by default (add it with
			// --allow for the session that logs in). The browser's last
			// redirect goes to localhost, which cannot reach the sandbox:
			// pi asks for that URL to be pasted.
		},
	},
	"claude": {
		Name: "claude", Command: []string{"claude"},
		NPM:         "@anthropic-ai/claude-code@2.1.328",
		Hosts:       []string{"api.anthropic.com"},
		Env:         []string{"ANTHROPIC_API_KEY"},
		Credentials: []Credential{anthropicKey},
		// Checked in the 2.1.328 linux-x64 binary: the global config is
		// join(CLAUDE_CONFIG_DIR || homedir(), ".claude.json") and the user
		// settings join(CLAUDE_CONFIG_DIR || ~/.claude, "settings.json");
		// credentials are .credentials.json in the same directory. Setting
		// CLAUDE_CONFIG_DIR to ~/.claude puts the file ~/.claude.json inside
		// the one directory the volume holds. ~/.claude.json may hold an API
		// key (primaryApiKey) and every host project path: a credential.
		State: State{
			Dirs: []string{".claude"},
			Env:  map[string]string{"CLAUDE_CONFIG_DIR": "/home/agent/.claude"},
			Settings: []string{".claude/settings.json", ".claude/settings.local.json", ".claude/CLAUDE.md",
				".claude/commands/", ".claude/agents/", ".claude/skills/", ".claude/hooks/", ".claude/plugins/"},
			Credentials: []string{".claude/.credentials.json", ".claude/.claude.json"},
			HostPaths:   map[string]string{".claude/.claude.json": ".claude.json"},
			// Login (/login): platform.claude.com (token exchange) besides
			// api.anthropic.com; the browser ends on a page showing a code
			// to paste back, so no redirect into the sandbox is needed.
		},
	},
	"codex": {
		Name: "codex", Command: []string{"codex"},
		NPM:         "@openai/codex@0.169.0",
		Hosts:       []string{"api.openai.com", "chatgpt.com"},
		Env:         []string{"OPENAI_API_KEY"},
		Credentials: []Credential{openaiKey},
		// From the Codex documentation (environment variables; the npm
		// package is a native binary): CODEX_HOME, default ~/.codex, holds
		// config.toml, auth.json, sessions/, logs and must already exist.
		State: State{
			Dirs:        []string{".codex"},
			Env:         map[string]string{"CODEX_HOME": "/home/agent/.codex"},
			Settings:    []string{".codex/config.toml", ".codex/AGENTS.md", ".codex/prompts/", ".codex/rules/", ".codex/skills/"},
			Credentials: []string{".codex/auth.json"},
			// Login: "codex login" waits for the browser's redirect to
			// localhost:1455 inside the sandbox, which nothing outside can
			// reach (the sandbox takes no inbound connection, by design);
			// "codex login --device-auth" with auth.openai.com allowed, or
			// an API key (--env OPENAI_API_KEY), works. Not tried here.
		},
	},
	"opencode": {
		Name: "opencode", Command: []string{"opencode"},
		NPM:         "opencode-ai@1.18.33",
		Hosts:       []string{"api.anthropic.com", "api.openai.com", "opencode.ai", "models.opencode.ai"},
		Env:         []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY"},
		Credentials: []Credential{anthropicKey, openaiKey},
		// From opencode's documentation (the npm package is a native
		// binary): XDG directories; config ~/.config/opencode (opencode.json,
		// agents, commands, plugins), data ~/.local/share/opencode (auth.json,
		// sessions), state ~/.local/state/opencode.
		State: State{
			Dirs:        []string{".config/opencode", ".local/share/opencode", ".local/state/opencode"},
			Settings:    []string{".config/opencode/"},
			Credentials: []string{".local/share/opencode/auth.json", ".local/share/opencode/mcp-auth.json"},
			// Login ("opencode auth login"): the provider's own hosts
			// (Anthropic: platform.claude.com); its ChatGPT flow redirects
			// to localhost like Codex's. Not tried here.
		},
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
