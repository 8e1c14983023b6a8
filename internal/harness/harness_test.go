package harness

import (
	"slices"
	"testing"
)

// Every preset's hosts are valid allowlist entries: a session adds them to
// its allowlist, and a preset that did not parse would fail every session.
func TestPresetsParse(t *testing.T) {
	for _, name := range Names() {
		p, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		hosts, err := p.AllowedHosts()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if len(hosts) != len(p.Hosts) {
			t.Errorf("%s: %d of %d hosts parsed", name, len(hosts), len(p.Hosts))
		}
		if name != "shell" && (len(p.Command) == 0 || p.NPM == "") {
			t.Errorf("%s: no command or package", name)
		}
	}
	if _, err := (Preset{Name: "bad", Hosts: []string{"https://x.example"}}).AllowedHosts(); err == nil {
		t.Error("a preset host with a scheme was accepted")
	}
}

// contacted is what each preset's pinned version asked the gate for, in a
// session with the preset's hosts allowed and nothing else (every other
// name refused and audited, none resolved): measured 2026-12-02 on the
// test host with the test resolver as the gate's, one run each of
// `opencode run`, `codex exec`, `claude -p` and `pi -p` with "say hi",
// claude and pi with a dummy Anthropic key, the others with none.
// Re-measure when a pin moves.
var contacted = map[string]struct {
	version string
	hosts   []string // every name it asked for
	refused []string // asked for, deliberately not allowed (the reason beside)
	others  []string // allowed for a provider the run did not use
}{
	"opencode": {"opencode-ai@1.18.33",
		[]string{"opencode.ai", "models.opencode.ai", "npm registry"},
		[]string{"npm registry"}, // plugins and updates: the agent could publish through it; opencode runs without it
		[]string{"api.anthropic.com", "api.openai.com"}},
	"codex": {"@openai/codex@0.169.0",
		[]string{"api.openai.com", "chatgpt.com", "api.github.com", "github.com"},
		[]string{"api.github.com", "github.com"}, // not needed to work; allow them with --allow where a task needs GitHub
		nil},
	"claude": {"@anthropic-ai/claude-code@2.1.328",
		[]string{"api.anthropic.com"}, nil, nil},
	"pi": {"@mariozechner/pi-coding-agent@0.73.1",
		[]string{"api.anthropic.com"}, nil,
		[]string{"api.openai.com", "generativelanguage.googleapis.com"}},
}

// TestPresetsNameWhatTheyContact: each preset allows what its pinned
// version was measured to contact (less what is refused on purpose), and
// nothing else but other providers' API hosts. Before this test the
// opencode preset allowed models.dev and lacked models.opencode.ai, and
// the claude preset allowed statsig.anthropic.com, which it never asked
// for.
func TestPresetsNameWhatTheyContact(t *testing.T) {
	for name, m := range contacted {
		p, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.NPM != m.version {
			t.Errorf("%s: the pin is %s, measured %s: measure the new version's hosts", name, p.NPM, m.version)
			continue
		}
		want := map[string]bool{}
		for _, h := range m.hosts {
			want[h] = !slices.Contains(m.refused, h)
		}
		for _, h := range m.others {
			want[h] = true
		}
		for _, h := range p.Hosts {
			if !want[h] {
				t.Errorf("%s allows %s, which %s was not seen to contact", name, h, m.version)
			}
		}
		for h, allow := range want {
			if allow && !slices.Contains(p.Hosts, h) {
				t.Errorf("%s does not allow %s, which %s contacts", name, h, m.version)
			}
		}
	}
	if len(contacted) != len(presets)-1 { // the shell contacts nothing of its own
		t.Errorf("%d presets measured, want every harness's", len(contacted))
	}
}
