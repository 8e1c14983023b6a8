// The state tests and their helpers (listing, a fake host home, tree
// digests, tar reading) in one file of about 400 lines: they share them all.

package tests

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/statevol"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// stateVolume is one line of `aisb state ls --json`.
type stateVolume struct {
	Name            string   `json:"name"`
	Harness         string   `json:"harness"`
	Scope           string   `json:"scope"`
	Project         string   `json:"project"`
	Size            int64    `json:"size"`
	LastUsed        string   `json:"last_used"`
	SettingsChanged []string `json:"settings_changed"`
	Unknown         bool     `json:"unknown"`
}

func (a *aisbUser) stateList(t *testing.T, env []string) []stateVolume {
	t.Helper()
	r := a.runEnv(t, env, "state", "ls", "--json")
	if r.Code != 0 {
		t.Fatalf("aisb state ls --json: %s", r)
	}
	var out []stateVolume
	dec := json.NewDecoder(strings.NewReader(r.Stdout))
	for {
		var v stateVolume
		if err := dec.Decode(&v); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("aisb state ls --json: %v\n%s", err, r.Stdout)
		}
		out = append(out, v)
	}
}

// projectVolume is this project's state volume for the harness, if listed.
func (a *aisbUser) projectVolume(t *testing.T, env []string, harness string) (stateVolume, bool) {
	t.Helper()
	for _, v := range a.stateList(t, env) {
		if v.Project == a.project && v.Harness == harness {
			return v, true
		}
	}
	return stateVolume{}, false
}

// fakeHome is a home for aisb itself holding a harness's host settings and
// credentials, owned by the test user; aisb runs with HOME set to it.
func fakeHome(t *testing.T) (home string, env []string) {
	t.Helper()
	home = testhost.UserDir(t)
	writeUserFile(t, filepath.Join(home, ".pi", "agent", "settings.json"), `{"theme":"imported-theme"}`)
	writeUserFile(t, filepath.Join(home, ".pi", "agent", "auth.json"), `{"anthropic":{"type":"api_key","key":"host-secret"}}`)
	writeUserFile(t, filepath.Join(home, ".pi", "agent", "prompts", "review.md"), "review carefully\n")
	writeUserFile(t, filepath.Join(home, ".claude.json"), `{"primaryApiKey":"host-secret"}`)
	// A link out of the harness's directory: an import never follows it.
	if err := os.Symlink("/etc/hostname", filepath.Join(home, ".pi", "agent", "prompts", "link.md")); err != nil {
		t.Fatal(err)
	}
	return home, []string{"HOME=" + home}
}

// treeDigest is every entry under dir with its type, mode, size, mtime and
// content hash: two equal digests mean nothing under dir changed.
func treeDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		v := fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			v += " " + hex.EncodeToString(sum[:])
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func homeUnchanged(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, v := range after {
		if before[p] != v {
			t.Errorf("the host's home changed during the session: %s: %q became %q", p, before[p], v)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("the host's home changed during the session: %s was removed", p)
		}
	}
}

// tarFiles lists a tar's entries with the content of its regular files.
func tarFiles(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read the exported tar: %v", err)
		}
		c, _ := io.ReadAll(tr)
		out[strings.TrimPrefix(filepath.Clean(h.Name), "./")] = string(c)
	}
}

// TestStateKeptPerProject: what the agent writes under the harness's state
// directory is there in the next session of the same project and harness,
// not in another project's session nor in a --fresh one; the directories are
// the agent's; ls, export and rm see the volume; the host's home is untouched.
func TestStateKeptPerProject(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), "")
	home, env := fakeHome(t)
	before := treeDigest(t, home)
	run := func(a *aisbUser, args ...string) testhost.Result {
		t.Helper()
		r := a.runEnv(t, env, append([]string{"run", "--harness", "pi", "--net", "none"}, args...)...)
		if r.Code != 0 {
			t.Fatalf("aisb run %v: %s", args, r)
		}
		return r
	}
	show := "for f in ~/.pi/marker ~/.pi/agent/auth.json ~/.pi/agent/settings.json; do test -e $f && echo HAS $f || echo NO $f; done"

	// The first session finds an empty state owned by the agent, and no
	// file of the host's home. Its mounts (root in the source filesystem,
	// mount point) show the state as the named volume's subdirectory, and
	// no other mount than a session without state has.
	mounts := `awk '{print "MOUNT " $4 " " $5}' /proc/self/mountinfo | grep -Ev ' (/|/proc.*|/sys.*|/dev.*)$'`
	r := run(a, "--", "sh", "-c", show+"; stat -c 'OWNER %n %u:%g' ~/.pi; echo kept > ~/.pi/marker; stat -c 'OWNER %n %u:%g' ~/.pi/marker; "+mounts)
	for _, want := range []string{"NO /home/agent/.pi/marker", "NO /home/agent/.pi/agent/auth.json", "NO /home/agent/.pi/agent/settings.json",
		"OWNER /home/agent/.pi 1000:1000", "OWNER /home/agent/.pi/marker 1000:1000"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("first session: want %q in:\n%s", want, r)
		}
	}
	v, ok := a.projectVolume(t, env, "pi")
	if !ok || v.Scope != "project" || v.Unknown || v.LastUsed == "" || len(v.SettingsChanged) != 0 {
		t.Fatalf("aisb state ls --json after one session: %+v (listed %v)", v, ok)
	}
	allowed := []string{"/project", "/etc/aisb", "/etc/resolv.conf", "/etc/hosts", "/etc/hostname", "/run/.containerenv", "/home/agent/.pi"}
	stateMounts := 0
	for _, l := range strings.Split(r.Stdout, "\n") {
		f := strings.Fields(strings.TrimPrefix(l, "MOUNT "))
		if !strings.HasPrefix(l, "MOUNT ") || len(f) != 2 {
			continue
		}
		if !slices.Contains(allowed, f[1]) {
			t.Errorf("unexpected mount in a session with state: %s (root %s)", f[1], f[0])
		}
		if f[1] == "/home/agent/.pi" {
			stateMounts++
			if !strings.HasSuffix(f[0], "/volumes/"+v.Name+"/_data/.pi") {
				t.Errorf("~/.pi is mounted from %s, not from the subdirectory .pi of the Podman volume %s", f[0], v.Name)
			}
		}
	}
	if stateMounts != 1 {
		t.Errorf("~/.pi mounted %d times, want once:\n%s", stateMounts, r.Stdout)
	}

	// The same project and harness: the file is there, and a settings
	// change is reported at the end of the session and by ls.
	r = run(a, "--", "sh", "-c", "cat ~/.pi/marker; mkdir -p ~/.pi/agent && echo '{\"hooks\":1}' > ~/.pi/agent/settings.json")
	if strings.TrimSpace(r.Stdout) != "kept" {
		t.Errorf("second session of the same project: want the marker, got %s", r)
	}
	if !strings.Contains(r.Stderr, "changed pi settings") || !strings.Contains(r.Stderr, ".pi/agent/settings.json") {
		t.Errorf("a session that changed settings.json should say so on stderr:\n%s", r.Stderr)
	}
	if v, _ = a.projectVolume(t, env, "pi"); strings.Join(v.SettingsChanged, ",") != ".pi/agent/settings.json" {
		t.Errorf("aisb state ls: settings_changed = %v, want [.pi/agent/settings.json]", v.SettingsChanged)
	}
	// A session that leaves settings alone shows none changed.
	run(a, "--", "true")
	if v, _ = a.projectVolume(t, env, "pi"); len(v.SettingsChanged) != 0 {
		t.Errorf("aisb state ls after a session that changed nothing: settings_changed = %v", v.SettingsChanged)
	}

	// Another project: its own, empty state.
	b := newAisb(t, testBaseImage(t), "")
	b.config, b.state = a.config, a.state
	r = run(b, "--", "sh", "-c", show)
	if !strings.Contains(r.Stdout, "NO /home/agent/.pi/marker") {
		t.Errorf("another project's session sees the first project's state:\n%s", r)
	}
	// --fresh: no volume at all.
	r = run(a, "--fresh", "--", "sh", "-c", show+"; stat -c 'OWNER %n %u:%g' ~/.pi")
	if !strings.Contains(r.Stdout, "NO /home/agent/.pi/marker") || !strings.Contains(r.Stdout, "OWNER /home/agent/.pi 1000:1000") {
		t.Errorf("a --fresh session should start with an empty ~/.pi of the agent's:\n%s", r)
	}
	// Control for the two above: the first project still has it, also in
	// review mode (the project copy-on-write, the state volume as always).
	if r = run(a, "--", "cat", "/home/agent/.pi/marker"); strings.TrimSpace(r.Stdout) != "kept" {
		t.Errorf("the first project lost its state: %s", r)
	}
	if r = run(a, "--review", "--", "sh", "-c", "cat ~/.pi/marker; touch /project/reviewed"); strings.TrimSpace(r.Stdout) != "kept" {
		t.Errorf("a --review session of the project lacks its state: %s", r)
	}
	if _, err := os.Lstat(filepath.Join(a.project, "reviewed")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the --review session wrote the project directly: %v", err)
	}

	// Export, to stdout and to a file, holds the file.
	r = a.runEnv(t, env, "state", "export", v.Name)
	if r.Code != 0 || tarFiles(t, []byte(r.Stdout))[".pi/marker"] != "kept\n" {
		t.Errorf("aisb state export %s to stdout: no .pi/marker in the tar (%d bytes): exit %d %s", v.Name, len(r.Stdout), r.Code, r.Stderr)
	}
	out := filepath.Join(testhost.UserDir(t), "state.tar")
	if r = a.runEnv(t, env, "state", "export", "-o", out, v.Name); r.Code != 0 {
		t.Fatalf("aisb state export -o: %s", r)
	}
	tb, _ := os.ReadFile(out)
	if got := tarFiles(t, tb); got[".pi/marker"] != "kept\n" || got[".pi/agent/settings.json"] == "" {
		t.Errorf("aisb state export -o: the tar lacks the session's files: %v", got)
	}

	// A name that only begins the volume's (Podman's CLI would take it for
	// the volume) removes nothing; the volume is still listed.
	if r = a.runEnv(t, env, "state", "rm", v.Name[:len(v.Name)-2]); r.Code == 0 {
		t.Errorf("aisb state rm of a prefix of %s: %s", v.Name, r)
	}
	if _, ok := a.projectVolume(t, env, "pi"); !ok {
		t.Fatalf("aisb state rm of a prefix removed %s", v.Name)
	}
	// rm, right after a session of the volume (its exited sandbox, which
	// the session's watchdog removes moments later, does not keep it): gone
	// from ls, and the next session starts empty.
	run(a, "--", "true")
	if r = a.runEnv(t, env, "state", "rm", v.Name); r.Code != 0 {
		t.Fatalf("aisb state rm: %s", r)
	}
	if _, ok := a.projectVolume(t, env, "pi"); ok {
		t.Errorf("aisb state ls still lists %s after rm", v.Name)
	}
	if r = run(a, "--", "sh", "-c", show); !strings.Contains(r.Stdout, "NO /home/agent/.pi/marker") {
		t.Errorf("the session after aisb state rm still has the marker:\n%s", r)
	}
	// Not a state volume: refused by name.
	if r = a.runEnv(t, env, "state", "rm", "aisb-not-a-state-volume"); r.Code == 0 {
		t.Errorf("aisb state rm of a volume that is not aisb state succeeded: %s", r)
	}

	homeUnchanged(t, before, treeDigest(t, home))
}

// TestStateHarnessScope: sandbox.state = "harness" shares one volume across
// projects; a project's .aisb.toml can narrow it to "none" but cannot widen
// "project" to "harness".
func TestStateHarnessScope(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), "version = 1\n[sandbox]\nstate = \"harness\"\n")
	b := newAisb(t, testBaseImage(t), "")
	b.config, b.state = a.config, a.state
	_, env := fakeHome(t)
	name := "aisb-state-pi"
	removeVolume(t, name)
	t.Cleanup(func() { removeVolume(t, name) })
	run := func(a *aisbUser, args ...string) testhost.Result {
		t.Helper()
		r := a.runEnv(t, env, append([]string{"run", "--harness", "pi", "--net", "none", "--"}, args...)...)
		if r.Code != 0 {
			t.Fatalf("aisb run %v: %s", args, r)
		}
		return r
	}
	run(a, "sh", "-c", "echo shared > ~/.pi/marker")
	if r := run(b, "cat", "/home/agent/.pi/marker"); strings.TrimSpace(r.Stdout) != "shared" {
		t.Errorf("scope harness: another project should see the state: %s", r)
	}
	found := false
	for _, v := range a.stateList(t, env) {
		if v.Name == name {
			found = v.Scope == "harness" && v.Project == ""
		}
	}
	if !found {
		t.Errorf("aisb state ls --json does not list %s with scope harness", name)
	}
	// An untrusted project file may narrow to none ...
	writeUserFile(t, filepath.Join(b.project, ".aisb.toml"), "version = 1\n[sandbox]\nstate = \"none\"\n")
	if r := run(b, "sh", "-c", "test -e ~/.pi/marker && echo HAS || echo NO"); strings.TrimSpace(r.Stdout) != "NO" {
		t.Errorf("a project file with state = none should give a fresh home: %s", r)
	}
	// ... and cannot widen project to harness.
	c := newAisb(t, testBaseImage(t), "version = 1\n[sandbox]\nstate = \"project\"\n")
	writeUserFile(t, filepath.Join(c.project, ".aisb.toml"), "version = 1\n[sandbox]\nstate = \"harness\"\n")
	r := run(c, "sh", "-c", "test -e ~/.pi/marker && echo HAS || echo NO")
	if strings.TrimSpace(r.Stdout) != "NO" || !strings.Contains(r.Stderr, "sandbox.state ignored") {
		t.Errorf("a project file widened state to harness: %s", r)
	}
}

// TestStateImport: `aisb state import pi` copies the host's pi settings into
// this project's volume, never auth.json unless --with-credentials (with a
// warning), never through a symbolic link; the host's home is untouched.
func TestStateImport(t *testing.T) {
	parallel(t)
	a := newAisb(t, testBaseImage(t), "")
	home, env := fakeHome(t)
	before := treeDigest(t, home)
	// state import reaches the volume through an image of aisb's: on a
	// fresh user there is none until one is built (it says so).
	if r := a.run(t, "image", "build", "--harness", "pi"); r.Code != 0 {
		t.Fatalf("aisb image build --harness pi: %s", r)
	}
	show := "cat ~/.pi/agent/settings.json; echo; for f in auth.json prompts/review.md prompts/link.md; do test -e ~/.pi/agent/$f && echo HAS $f || echo NO $f; done; stat -c 'OWNER %n %u:%g %a' ~/.pi/agent ~/.pi/agent/settings.json; test -e ~/.pi/agent/auth.json && stat -c 'OWNER %n %u:%g %a' ~/.pi/agent/auth.json; true"

	r := a.runEnv(t, env, "state", "import", "pi")
	if r.Code != 0 {
		t.Fatalf("aisb state import pi: %s", r)
	}
	if !strings.Contains(r.Stderr, "link.md") || !strings.Contains(r.Stderr, "auth.json") {
		t.Errorf("import should name what it skipped (the link, the credential):\n%s", r.Stderr)
	}
	r = a.runEnv(t, env, "run", "--harness", "pi", "--net", "none", "--", "sh", "-c", show)
	for _, want := range []string{"imported-theme", "NO auth.json", "HAS prompts/review.md", "NO prompts/link.md",
		"OWNER /home/agent/.pi/agent 1000:1000", "OWNER /home/agent/.pi/agent/settings.json 1000:1000"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("after import without credentials: want %q in:\n%s", want, r)
		}
	}
	if strings.Contains(r.Stderr, "changed pi settings") {
		t.Errorf("imported settings were reported as changed by the session:\n%s", r.Stderr)
	}

	r = a.runEnv(t, env, "state", "import", "--with-credentials", "pi")
	if r.Code != 0 || !strings.Contains(r.Stderr, "WARNING") || !strings.Contains(r.Stderr, "agent can read") {
		t.Fatalf("aisb state import pi --with-credentials should warn that the agent can read them: %s", r)
	}
	r = a.runEnv(t, env, "run", "--harness", "pi", "--net", "none", "--", "sh", "-c", show+"; cat ~/.pi/agent/auth.json")
	for _, want := range []string{"HAS auth.json", "OWNER /home/agent/.pi/agent/auth.json 1000:1000 600", "host-secret"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("after import --with-credentials: want %q in:\n%s", want, r)
		}
	}
	// A harness without state, and a bad argument, are refused clearly.
	if r = a.runEnv(t, env, "state", "import", "shell"); r.Code != 78 || !strings.Contains(r.Stderr, "keeps no state") {
		t.Errorf("aisb state import shell: want exit 78 naming the reason, got %s", r)
	}
	if r = a.runEnv(t, env, "state", "import", "nope"); r.Code != 78 || !strings.Contains(r.Stderr, "unknown harness") {
		t.Errorf("aisb state import nope: want exit 78, got %s", r)
	}
	homeUnchanged(t, before, treeDigest(t, home))
}

// TestStatePiTerminal: pi itself, in a terminal, with its state volume: a
// model chosen with Ctrl-P in one session (pi saves it in settings.json) is
// the model of the next. The key is passed by name as the README says
// (pi lists no model without one); no request is made with it.
func TestStatePiTerminal(t *testing.T) {
	a := newAisb(t, "", "")
	home, _ := fakeHome(t)
	before := treeDigest(t, home)
	env := []string{"TERM=xterm-256color", "HOME=" + home, "XDG_CONFIG_HOME=" + a.config, "XDG_STATE_HOME=" + a.state,
		"AISB_BASE_IMAGE=" + testhost.BaseImage, "CONTAINER_HOST=" + testhost.Service(t), "ANTHROPIC_API_KEY=not-a-real-key"}
	env = append(env, a.helpers...)
	tm := testhost.NewTerminal(t, a.project, env, a.bin+" run --env ANTHROPIC_API_KEY")
	tm.WaitFor("pi v", 5*time.Minute)
	time.Sleep(time.Second)
	first := tm.Screen()
	tm.Keys("C-p")
	tm.WaitFor("Switched to", 10*time.Second)
	tm.Keys("C-d")
	time.Sleep(300 * time.Millisecond)
	tm.Keys("C-d")
	tm.WaitFor("EXIT=0", 30*time.Second)
	var settings struct {
		DefaultProvider string `json:"defaultProvider"`
		DefaultModel    string `json:"defaultModel"`
	}
	v, ok := a.projectVolume(t, []string{"HOME=" + home}, "pi")
	if !ok {
		t.Fatal("no state volume for pi after a pi session")
	}
	if strings.Join(v.SettingsChanged, ",") != ".pi/agent/settings.json" {
		t.Errorf("aisb state ls after pi saved its model: settings_changed = %v", v.SettingsChanged)
	}
	r := a.runEnv(t, []string{"HOME=" + home}, "state", "export", v.Name)
	if err := json.Unmarshal([]byte(tarFiles(t, []byte(r.Stdout))[".pi/agent/settings.json"]), &settings); err != nil || settings.DefaultModel == "" {
		t.Fatalf("pi's settings.json in the volume after Ctrl-P: %v %+v", err, settings)
	}
	if strings.Contains(first, settings.DefaultModel) {
		t.Fatalf("the first session already showed %q before Ctrl-P; the second session's check would prove nothing:\n%s", settings.DefaultModel, first)
	}

	tm2 := testhost.NewTerminal(t, a.project, env, a.bin+" run --env ANTHROPIC_API_KEY")
	tm2.WaitFor("pi v", 5*time.Minute)
	tm2.WaitFor(settings.DefaultModel, 20*time.Second)
	tm2.Keys("C-d")
	time.Sleep(300 * time.Millisecond)
	tm2.Keys("C-d")
	tm2.WaitFor("EXIT=0", 30*time.Second)
	homeUnchanged(t, before, treeDigest(t, home))
}

// removeVolume removes the volume of exactly this name, if there is one:
// `podman volume rm` alone would remove another volume whose name begins
// with it (another test's project volume, for aisb-state-pi).
func removeVolume(t *testing.T, name string) {
	if testhost.Podman(t, "volume", "exists", name).Code == 0 {
		testhost.Podman(t, "volume", "rm", "-f", name)
	}
}

// removeStateVolumes removes the state volumes of a test's project.
func removeStateVolumes(t *testing.T, project string) {
	r := testhost.Podman(t, "volume", "ls", "-q", "--filter", "label="+statevol.LabelProject+"="+project)
	for _, name := range strings.Fields(r.Stdout) {
		testhost.Podman(t, "volume", "rm", "-f", name)
	}
}
