package statevol

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/harness"
)

func pi(t *testing.T) harness.Preset {
	t.Helper()
	h, err := harness.Lookup("pi")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestName(t *testing.T) {
	h := pi(t)
	a := Target{Harness: h, Scope: config.StateProject, Project: "/home/u/a"}.Name()
	b := Target{Harness: h, Scope: config.StateProject, Project: "/home/u/b"}.Name()
	if a == b || !strings.HasPrefix(a, "aisb-state-pi-") || len(a) != len("aisb-state-pi-")+12 {
		t.Errorf("project names: %q %q", a, b)
	}
	if n := (Target{Harness: h, Scope: config.StateHarness, Project: "/home/u/a"}).Name(); n != "aisb-state-pi" {
		t.Errorf("harness scope name = %q", n)
	}
	// Whatever the project's path holds, the name is the prefix and 12 hex
	// digits: a path cannot steer it to another volume or out of Podman's
	// name syntax.
	valid := regexp.MustCompile(`^aisb-state-pi-[0-9a-f]{12}$`)
	for _, p := range []string{"/x/../aisb-state-pi", "/p\n--filter=label", "/p/aisb-state-claude", strings.Repeat("/a", 3000), "/p\x00q"} {
		if n := (Target{Harness: h, Scope: config.StateProject, Project: p}).Name(); !valid.MatchString(n) {
			t.Errorf("project %q: name %q", p, n)
		}
	}
}

// TestOwns: a volume of the target's name is used only when its labels
// name the same harness, scope and project.
func TestOwns(t *testing.T) {
	h := pi(t)
	proj := Target{Harness: h, Scope: config.StateProject, Project: "/home/u/a"}
	shared := Target{Harness: h, Scope: config.StateHarness, Project: "/home/u/a"}
	labels := func(harness, scope, project string) map[string]string {
		l := map[string]string{LabelHarness: harness, LabelScope: scope}
		if project != "" {
			l[LabelProject] = project
		}
		return l
	}
	for _, c := range []struct {
		t      Target
		labels map[string]string
		ok     bool
	}{
		{proj, labels("pi", "project", "/home/u/a"), true},
		{proj, labels("pi", "project", "/home/u/b"), false},
		{proj, labels("claude", "project", "/home/u/a"), false},
		{proj, labels("pi", "harness", ""), false},
		{shared, labels("pi", "harness", ""), true},
		{shared, labels("pi", "harness", "/home/u/a"), false},
		{shared, labels("pi", "project", "/home/u/a"), false},
	} {
		err := c.t.owns("v", c.labels)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrOtherScope)) {
			t.Errorf("target %s %s, labels %v: %v", c.t.Scope, c.t.Project, c.labels, err)
		}
	}
}

func TestMountsMirrorHome(t *testing.T) {
	h, _ := harness.Lookup("opencode")
	ms := Mounts("v", h.State)
	if len(ms) != 3 || ms[1].Dest != "/home/agent/.local/share/opencode" || ms[1].SubPath != ".local/share/opencode" {
		t.Errorf("opencode mounts: %+v", ms[1])
	}
	names := tarNames(t, skeleton(h.State.Dirs))
	for _, want := range []string{".config", ".config/opencode", ".local", ".local/share", ".local/share/opencode", ".local/state/opencode"} {
		if !slices.Contains(names, want) {
			t.Errorf("skeleton lacks %s: %v", want, names)
		}
	}
}

func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err != nil {
			return out
		}
		out = append(out, tarName(h.Name))
	}
}

func TestHashSettingsAndDiff(t *testing.T) {
	st := pi(t).State
	mk := func(files map[string]string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for n, c := range files {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Size: int64(len(c)), Mode: 0o644})
			tw.Write([]byte(c))
		}
		tw.Close()
		return buf.Bytes()
	}
	before, err := hashSettings(bytes.NewReader(mk(map[string]string{
		"./.pi/agent/settings.json": "{}", "/.pi/agent/sessions/x.jsonl": "chat", ".pi/agent/extensions/e.ts": "1", ".pi/agent/auth.json": "k",
	})), st)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 2 || before[".pi/agent/settings.json"] == "" || before[".pi/agent/extensions/e.ts"] == "" {
		t.Fatalf("hashed %v; want settings.json and the extension only", before)
	}
	after, _ := hashSettings(bytes.NewReader(mk(map[string]string{
		".pi/agent/settings.json": `{"x":1}`, ".pi/agent/sessions/x.jsonl": "more chat", ".pi/agent/AGENTS.md": "obey",
	})), st)
	if got := diff(before, after); strings.Join(got, ",") != ".pi/agent/AGENTS.md,.pi/agent/extensions/e.ts,.pi/agent/settings.json" {
		t.Errorf("diff = %v", got)
	}
	if got := diff(after, after); len(got) != 0 {
		t.Errorf("diff of the same = %v", got)
	}
}

func TestCollectHostFiles(t *testing.T) {
	home := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(home, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".pi/agent/settings.json", "{}")
	write(".pi/agent/auth.json", "secret")
	write(".pi/agent/prompts/a.md", "a")
	write(".pi/agent/sessions/s.jsonl", "chat")
	write(".pi/agent/prompts/big.md", strings.Repeat("x", MaxImportFile+1))
	os.Symlink("/etc/hostname", filepath.Join(home, ".pi/agent/prompts/link.md"))
	os.Symlink(filepath.Join(home, ".pi/agent/prompts"), filepath.Join(home, ".pi/agent/themes"))
	// A FIFO where a settings file belongs: skipped, never opened blocking.
	if err := syscall.Mkfifo(filepath.Join(home, ".pi/agent/models.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := pi(t).State

	files, skipped, err := collect(home, st, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, f.vol)
	}
	slices.Sort(got)
	if strings.Join(got, ",") != ".pi/agent/prompts/a.md,.pi/agent/settings.json" {
		t.Errorf("copied %v", got)
	}
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Path] = s.Reason
	}
	for p, want := range map[string]string{".pi/agent/prompts/link.md": "symbolic link", ".pi/agent/prompts/big.md": "larger", ".pi/agent/themes": "symbolic link", ".pi/agent/models.json": "not a regular file"} {
		if !strings.Contains(reasons[p], want) {
			t.Errorf("%s: skipped as %q, want %q (all: %v)", p, reasons[p], want, reasons)
		}
	}

	files, _, _ = collect(home, st, true)
	var cred *hostFile
	for i := range files {
		if files[i].vol == ".pi/agent/auth.json" {
			cred = &files[i]
		}
	}
	if cred == nil || string(cred.data) != "secret" || cred.mode != 0o600 {
		t.Errorf("with credentials: auth.json = %+v", cred)
	}

	// A harness directory that is itself a link is not followed.
	home2 := t.TempDir()
	os.Symlink(filepath.Join(home, ".pi"), filepath.Join(home2, ".pi"))
	files, skipped, _ = collect(home2, st, true)
	if len(files) != 0 || len(skipped) == 0 {
		t.Errorf("through a linked ~/.pi: copied %d files, skipped %v", len(files), skipped)
	}
}

func TestClaudeHostPath(t *testing.T) {
	h, _ := harness.Lookup("claude")
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, ".claude.json"), []byte(`{"primaryApiKey":"k"}`), 0o600)
	files, _, _ := collect(home, h.State, false)
	if len(files) != 0 {
		t.Errorf("~/.claude.json copied without --with-credentials: %v", files[0].vol)
	}
	files, _, _ = collect(home, h.State, true)
	if len(files) != 1 || files[0].vol != ".claude/.claude.json" {
		t.Errorf("with credentials: %+v", files)
	}
}
