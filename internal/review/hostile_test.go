// hostile_test.go is long because each thing a hijacked agent can leave in
// its layer (sparse files, fifos, locked modes, symlinks, names) is its own case.

package review

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/internal/safefile"
)

// A session on a fresh project of one file, with an empty upper layer.
func emptySession(t *testing.T) (proj string, s *Session) {
	t.Helper()
	proj = t.TempDir()
	write(t, filepath.Join(proj, "keep.txt"), "keep\n", 0o644)
	s, err := Begin(t.TempDir(), Meta{Session: "20261130-000000-bbbbbb", Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	return proj, s
}

// An agent's sparse terabyte costs it nothing; aisb review does not read
// it, and --apply refuses before writing anything, naming it.
func TestHugeSparseFile(t *testing.T) {
	proj, s := emptySession(t)
	f, err := os.Create(filepath.Join(s.Upper(), "huge.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Skipf("no sparse files here: %v", err)
	}
	f.Close()
	before := tree(t, proj)
	start := time.Now()
	cs, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("listing a sparse terabyte took %s", d)
	}
	c := find(cs, "huge.bin")
	if c == nil || !c.NotCompared || c.SHA256 != "" || c.NoDiff == "" || c.Size != 1<<40 {
		t.Fatalf("huge.bin: %+v", c)
	}
	_, err = s.Apply(context.Background())
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "huge.bin") {
		t.Fatalf("apply: %v, want ErrNoSpace naming huge.bin", err)
	}
	if after := tree(t, proj); !mapsEqual(before, after) {
		t.Errorf("a refused apply changed the project: %v", after)
	}
}

// Past the listing's read budget files are listed as modified, unread.
func TestReadBudget(t *testing.T) {
	defer func(a, b int64) { maxHashSize, maxReadTotal = a, b }(maxHashSize, maxReadTotal)
	maxHashSize, maxReadTotal = 100, 150
	proj, _ := emptySession(t)
	write(t, filepath.Join(proj, "same.txt"), strings.Repeat("s", 80), 0o644)
	s, err := Begin(t.TempDir(), Meta{Session: "s2", Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(s.Upper(), "a.txt"), strings.Repeat("a", 80), 0o644)
	write(t, filepath.Join(s.Upper(), "b.txt"), strings.Repeat("b", 80), 0o644)
	write(t, filepath.Join(s.Upper(), "big.txt"), strings.Repeat("c", 101), 0o644)
	write(t, filepath.Join(s.Upper(), "same.txt"), strings.Repeat("s", 80), 0o644)
	cs, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	if c := find(cs, "a.txt"); c == nil || c.NotCompared || c.SHA256 == "" {
		t.Errorf("a.txt within budget: %+v", c)
	}
	for _, p := range []string{"b.txt", "big.txt", "same.txt"} {
		if c := find(cs, p); c == nil || !c.NotCompared || c.SHA256 != "" || c.Kind == ModeOnly {
			t.Errorf("%s past the budget: %+v", p, c)
		}
	}
	// Apply copies unread files whole, checked by size.
	if _, err := s.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(proj, "big.txt")); len(b) != 101 {
		t.Errorf("big.txt applied as %d bytes", len(b))
	}
}

// What aisb opens to read is a regular file, and the open never blocks.
func TestOpenRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	r, err := openRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan error, 1)
	go func() { _, err := r.open("fifo"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, safefile.ErrNotRegular) {
			t.Errorf("fifo: %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("opening a fifo blocked")
	}
	if _, err := r.open("link"); !errors.Is(err, safefile.ErrSymlink) {
		t.Errorf("symlink: %v, want ErrSymlink", err)
	}
	if _, err := r.open("d"); !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("directory: %v, want ErrNotRegular", err)
	}
}

// A fifo the agent made is listed, never read, never applied; a host fifo
// the agent replaced by a file is not read either.
func TestFifos(t *testing.T) {
	proj, s := emptySession(t)
	if err := unix.Mkfifo(filepath.Join(proj, "hostpipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Begin(t.TempDir(), Meta{Session: "s2", Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	unix.Mkfifo(filepath.Join(s.Upper(), "agentpipe"), 0o644)
	write(t, filepath.Join(s.Upper(), "hostpipe"), "now a file\n", 0o644)
	cs, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	if c := find(cs, "agentpipe"); c == nil || c.Kind != Special {
		t.Errorf("agentpipe: %+v", c)
	}
	if c := find(cs, "hostpipe"); c == nil || c.Kind != Modified || c.OldType != "other" {
		t.Errorf("hostpipe: %+v", c)
	}
	res, err := s.Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Skipped, []string{"agentpipe"}) {
		t.Errorf("skipped %q", res.Skipped)
	}
	if _, err := os.Lstat(filepath.Join(proj, "agentpipe")); err == nil {
		t.Error("the agent's fifo was applied")
	}
}

// The agent replaces a directory by a symlink out of the project: apply
// makes the symlink, writes nothing through it, and the outside is as it was.
func TestSymlinkReplacingADirectory(t *testing.T) {
	proj, outside := t.TempDir(), t.TempDir()
	write(t, filepath.Join(outside, "canary"), "c\n", 0o644)
	write(t, filepath.Join(proj, "docs/a.md"), "a\n", 0o644)
	write(t, filepath.Join(proj, "docs/sub/b.md"), "b\n", 0o644)
	s, err := Begin(t.TempDir(), Meta{Session: "s", Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.Upper(), "docs")); err != nil {
		t.Fatal(err)
	}
	outBefore := tree(t, outside)
	cs, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	if c := find(cs, "docs"); c == nil || c.Kind != Modified || c.OldType != "dir" || !slices.Contains(c.Flags, "symlink pointing outside the project") {
		t.Errorf("docs: %+v", c)
	}
	if c := find(cs, "docs/sub/b.md"); c == nil || c.Kind != Deleted || !c.Within {
		t.Errorf("docs/sub/b.md: %+v", c)
	}
	if _, err := s.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tg, err := os.Readlink(filepath.Join(proj, "docs")); err != nil || tg != outside {
		t.Errorf("docs after apply: %q %v", tg, err)
	}
	if after := tree(t, outside); !mapsEqual(outBefore, after) {
		t.Errorf("apply touched the symlink's target:\n%v\n%v", outBefore, after)
	}
}

// The agent made a directory, a file and /project itself unreadable: the
// listing still reads them, reports the agent's modes, and puts them back;
// apply reproduces them.
func TestUnreadableModes(t *testing.T) {
	proj, s := emptySession(t)
	up := s.Upper()
	write(t, filepath.Join(up, "locked/secret"), "s\n", 0o644)
	write(t, filepath.Join(up, "locked/deeper/x"), "x\n", 0o644)
	write(t, filepath.Join(up, "noread.txt"), "n\n", 0o000)
	os.Chmod(filepath.Join(up, "locked/deeper"), 0o000)
	os.Chmod(filepath.Join(up, "locked"), 0o000)
	os.Chmod(up, 0o000)
	t.Cleanup(func() { writable(up) })
	if os.Geteuid() == 0 {
		t.Log("as root the modes do not stop reading; the test still checks they are kept")
	}
	cs, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]string{"locked": "0000", "locked/deeper": "0000", "noread.txt": "0000"} {
		if c := find(cs, p); c == nil || c.Mode != mode {
			t.Errorf("%s: %+v, want mode %s", p, c, mode)
		}
	}
	if c := find(cs, "locked/deeper/x"); c == nil || c.Kind != Added || c.SHA256 == "" {
		t.Errorf("locked/deeper/x: %+v", c)
	}
	// Check from the top, opening each level as the test goes down.
	modeIs := func(root string, levels ...string) {
		t.Helper()
		var st unix.Stat_t
		p := root
		for _, l := range levels {
			if l != "" {
				p = filepath.Join(p, l)
			}
			if err := unix.Lstat(p, &st); err != nil || st.Mode&0o777 != 0 {
				t.Errorf("%s: mode %o (%v), want 0000", p, st.Mode&0o777, err)
			}
			os.Chmod(p, 0o700)
		}
	}
	modeIs(up, "", "locked", "deeper")
	modeIs(up, "noread.txt")
	for _, p := range []string{"locked/deeper", "locked", "noread.txt", ""} {
		os.Chmod(filepath.Join(up, p), 0)
	}
	if _, err := s.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	modeIs(proj, "locked", "deeper")
	modeIs(proj, "noread.txt")
	if b, err := os.ReadFile(filepath.Join(proj, "locked/deeper/x")); err != nil || string(b) != "x\n" {
		t.Errorf("locked/deeper/x applied as %q %v", b, err)
	}
}

// Names that pose as the listing's own words, bidirectional overrides,
// DEL and C1 controls are all quoted; every byte printed is printable.
func TestHostileNamesArePrinted(t *testing.T) {
	proj, s := emptySession(t)
	_ = proj
	names := []string{
		"a.txt  (mode 0644)",
		"rtl\u202egnp.sh",
		"del\x7f.txt",
		"c1\u009b2J.txt",
		"-n",
	}
	for _, n := range names {
		write(t, filepath.Join(s.Upper(), n), "x\n\x1b]52;c;ZXZpbA==\x07\r\n", 0o644)
	}
	cs, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	Render(&b, s, cs, true)
	out := b.String()
	for i := 0; i < len(out); i++ {
		if c := out[i]; c != '\n' && (c < 0x20 || c > 0x7e) {
			t.Fatalf("byte %#x at %d printed raw:\n%s", c, i, out)
		}
	}
	for _, want := range []string{`"a.txt  (mode 0644)"`, `"rtl\u202egnp.sh"`, `"del\x7f.txt"`, `"c1\u009b2J.txt"`, `\x1b]52;c;ZXZpbA==\x07\x0d`} {
		if !strings.Contains(out, want) {
			t.Errorf("listing lacks %s:\n%s", want, out)
		}
	}
}

// A diff is bounded: a file rewritten line by line does not make the
// listing slow, and says why no diff is shown.
func TestDiffIsBounded(t *testing.T) {
	var a, b strings.Builder
	for i := 0; i < 200_000; i++ {
		a.WriteString("old line\n")
		b.WriteString("new line\n")
	}
	start := time.Now()
	_, ok := Unified(a.String(), b.String())
	if ok {
		t.Error("a diff of 400 000 changed lines was computed")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("giving up took %s", d)
	}
}

func TestGitFlags(t *testing.T) {
	for p, want := range map[string]string{
		".git/hooks/pre-commit":             "git hook",
		"sub/.git/hooks/post-checkout":      "git hook",
		".git/modules/lib/hooks/pre-push":   "git hook",
		".git/config":                       "git configuration",
		".git/config.worktree":              "git configuration",
		".git/worktrees/wt/config.worktree": "git configuration",
		".git/modules/lib/config":           "git configuration",
		".git/info/attributes":              "git attributes",
		".git/commondir":                    "another repository",
		".git/objects/info/alternates":      "another repository",
		".git/worktrees/wt/gitdir":          "another repository",
		".git/sequencer/todo":               "git metadata",
		".git/objects/ab/cdef":              "",
		".git/refs/heads/main":              "",
		".git/index":                        "",
		".git/HEAD":                         "",
		".git/logs/HEAD":                    "",
		".git/worktrees/wt/HEAD":            "",
		"src/hooks/useThing.js":             "",
		"configure":                         "",
	} {
		got := strings.Join(hostRunFlags(Change{Path: p, Kind: Added, Type: "file", Mode: "0644", mode: 0o644}), "; ")
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: flags %q, want %q", p, got, want)
		}
	}
	del := hostRunFlags(Change{Path: ".git", Kind: Deleted, Type: "dir"})
	if len(del) != 1 || !strings.Contains(del[0], "deletes a git repository") {
		t.Errorf("deleting .git: %q", del)
	}
}
