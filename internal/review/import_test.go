package review

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarOf(t *testing.T, entries []tarEntry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.link}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return &b
}

// TestImport: the copy's archive becomes a layer Compute reads as the
// agent's changes: a changed file, a new one, a new link, a deleted file
// and a deleted directory (one whiteout for it); what did not change, and
// what was never sent, are no change.
func TestImport(t *testing.T) {
	project, upper := t.TempDir(), t.TempDir()
	write := func(name, body string) {
		os.MkdirAll(filepath.Dir(filepath.Join(project, name)), 0o755)
		if err := os.WriteFile(filepath.Join(project, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("same.txt", "same\n")
	write("changed.txt", "old\n")
	write("gone.txt", "gone\n")
	write("olddir/x.txt", "x\n")
	write("ignored.log", "never sent\n")
	// Of a size, differing only in its last block: written whole.
	big := bytes.Repeat([]byte("a"), 200000)
	write("big.bin", string(big))
	big[len(big)-1] = 'b'
	sent := []string{"same.txt", "changed.txt", "gone.txt", "olddir", "olddir/x.txt", "big.bin"}
	archive := tarOf(t, []tarEntry{
		{name: "project/", typ: tar.TypeDir, mode: 0o755},
		{name: "project/same.txt", body: "same\n", typ: tar.TypeReg, mode: 0o644},
		{name: "project/changed.txt", body: "new\n", typ: tar.TypeReg, mode: 0o644},
		{name: "project/made/", typ: tar.TypeDir, mode: 0o755},
		{name: "project/made/n.txt", body: "n\n", typ: tar.TypeReg, mode: 0o600},
		{name: "project/lnk", link: "same.txt", typ: tar.TypeSymlink, mode: 0o777},
		{name: "project/big.bin", body: string(big), typ: tar.TypeReg, mode: 0o644},
	})
	st, err := Import(upper, project, archive, sent)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != 2 {
		t.Errorf("stats %+v: want 2 whiteouts (gone.txt, olddir)", st)
	}
	changes, err := Compute(project, upper)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Kind{}
	for _, c := range changes {
		got[c.Path] = c.Kind
	}
	if b, err := os.ReadFile(filepath.Join(upper, "big.bin")); err != nil || !bytes.Equal(b, big) {
		t.Errorf("big.bin in the layer: %d bytes, %v; want the copy's", len(b), err)
	}
	want := map[string]Kind{"big.bin": Modified, "changed.txt": Modified, "made": Added, "made/n.txt": Added, "lnk": Added, "gone.txt": Deleted, "olddir": Deleted, "olddir/x.txt": Deleted}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("%s: %q, want %q (all: %v)", p, got[p], k, got)
		}
	}
	for _, p := range []string{"same.txt", "ignored.log"} {
		if _, ok := got[p]; ok {
			t.Errorf("%s is a change: %v", p, got)
		}
	}
}

// TestImportRefusesEscapes: a name that leaves the layer, or a file under
// a link, is refused, and nothing is written outside the layer.
func TestImportRefusesEscapes(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, entries := range map[string][]tarEntry{
		// A hard link to a symbolic link of the copy's would read the
		// host's file it names into the layer, and apply into the project.
		"hard link through a link": {
			{name: "project/l", link: secret, typ: tar.TypeSymlink, mode: 0o777},
			{name: "project/copy", link: "project/l", typ: tar.TypeLink, mode: 0o644},
		},
		"hard link beneath a link": {
			{name: "project/d", link: outside, typ: tar.TypeSymlink, mode: 0o777},
			{name: "project/copy", link: "project/d/secret", typ: tar.TypeLink, mode: 0o644},
		},
		"dotdot": {{name: "project/../evil", body: "x", typ: tar.TypeReg, mode: 0o644}},
		"under a link": {
			{name: "project/l", link: outside, typ: tar.TypeSymlink, mode: 0o777},
			{name: "project/l/evil", body: "x", typ: tar.TypeReg, mode: 0o644},
		},
	} {
		t.Run(name, func(t *testing.T) {
			project, upper := t.TempDir(), filepath.Join(t.TempDir(), "upper")
			os.Mkdir(upper, 0o700)
			_, err := Import(upper, project, tarOf(t, entries), nil)
			if !errors.Is(err, ErrImport) {
				t.Errorf("Import: %v, want ErrImport", err)
			}
			for _, p := range []string{filepath.Join(filepath.Dir(upper), "evil"), filepath.Join(outside, "evil")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("written outside the layer: %s", p)
				}
			}
			if b, err := os.ReadFile(filepath.Join(upper, "copy")); err == nil {
				t.Errorf("the layer holds a copy of a host file: %q", b)
			}
		})
	}
}

// What was sent to the engine and why an import failed are kept in the
// review's directory for the session's watchdog and aisb review; nothing
// kept reads as none.
func TestImportRecords(t *testing.T) {
	s, err := Begin(t.TempDir(), Meta{Session: "20261206-000000-dddddd", Project: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if paths, ok, err := s.Sent(); ok || err != nil || paths != nil {
		t.Errorf("nothing recorded: Sent() = %q, %v, %v", paths, ok, err)
	}
	if why := s.ImportFailure(); why != "" {
		t.Errorf("nothing recorded: ImportFailure() = %q", why)
	}
	if err := s.RecordSent([]string{"a.txt", "dir", "dir/b.txt"}); err != nil {
		t.Fatal(err)
	}
	if paths, ok, err := s.Sent(); !ok || err != nil || !slices.Equal(paths, []string{"a.txt", "dir", "dir/b.txt"}) {
		t.Errorf("Sent() = %q, %v, %v", paths, ok, err)
	}
	if err := s.RecordImportFailure("cut short"); err != nil {
		t.Fatal(err)
	}
	if why := s.ImportFailure(); why != "cut short" {
		t.Errorf("ImportFailure() = %q", why)
	}
}

// TestImportShapes: a directory the agent left read-only still gets its
// contents (its mode is set last), and a directory it replaced by a file
// needs no whiteout for what was below it (the file hides it).
func TestImportShapes(t *testing.T) {
	project, upper := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(project, "src"), 0o755)
	os.WriteFile(filepath.Join(project, "src", "a"), []byte("a\n"), 0o644)
	archive := tarOf(t, []tarEntry{
		{name: "project/", typ: tar.TypeDir, mode: 0o755},
		{name: "project/ro/", typ: tar.TypeDir, mode: 0o555},
		{name: "project/ro/sub/", typ: tar.TypeDir, mode: 0o755},
		{name: "project/ro/sub/f", body: "f\n", typ: tar.TypeReg, mode: 0o644},
		{name: "project/src", body: "now a file\n", typ: tar.TypeReg, mode: 0o644},
	})
	t.Cleanup(func() { os.Chmod(filepath.Join(upper, "ro"), 0o755) })
	st, err := Import(upper, project, archive, []string{"src", "src/a"})
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	if st.Deleted != 0 {
		t.Errorf("stats %+v: no whiteout is needed below a directory turned file", st)
	}
	if b, err := os.ReadFile(filepath.Join(upper, "ro", "sub", "f")); err != nil || string(b) != "f\n" {
		t.Errorf("ro/sub/f in the layer: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(upper, "ro")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("ro's mode in the layer: %v, %v; want 0555", fi, err)
	}
}

// TestImportReadsNoProjectLink: the project's side is read through
// directories only. With a link in the project that leads outside it, a
// file of the copy under that name is compared with nothing, and nothing
// of the file outside reaches the layer.
func TestImportReadsNoProjectLink(t *testing.T) {
	project, upper, outside := t.TempDir(), t.TempDir(), t.TempDir()
	secret := bytes.Repeat([]byte("S"), 100<<10)
	os.WriteFile(filepath.Join(outside, "f"), secret, 0o644)
	if err := os.Symlink(outside, filepath.Join(project, "l")); err != nil {
		t.Fatal(err)
	}
	// The copy's l is a directory holding f: the outside file's first
	// 64 KiB and one byte more that differs.
	body := append(slices.Clone(secret[:64<<10]), 'x')
	archive := tarOf(t, []tarEntry{
		{name: "project/", typ: tar.TypeDir, mode: 0o755},
		{name: "project/l/", typ: tar.TypeDir, mode: 0o755},
		{name: "project/l/f", body: string(body), typ: tar.TypeReg, mode: 0o644},
	})
	if _, err := Import(upper, project, archive, []string{"l"}); err != nil {
		t.Fatalf("Import: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(upper, "l", "f"))
	if err != nil || !bytes.Equal(b, body) {
		t.Errorf("l/f in the layer: %d bytes, %v; want the copy's %d", len(b), err, len(body))
	}
}

// TestApplyWaitsForImport: once a copy was sent, Apply refuses the layer
// until Reimport has filled it, and a Reimport makes the layer anew.
func TestApplyWaitsForImport(t *testing.T) {
	project := t.TempDir()
	os.WriteFile(filepath.Join(project, "a.txt"), []byte("old\n"), 0o644)
	s, err := Begin(t.TempDir(), Meta{Session: "20261206-000000-eeeeee", Project: project})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RecordSent([]string{"a.txt"}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(s.Upper(), "partial"), []byte("cut short\n"), 0o600)
	if _, err := s.Apply(context.Background()); !errors.Is(err, ErrImportPending) {
		t.Fatalf("Apply before the import: %v, want ErrImportPending", err)
	}
	archive := tarOf(t, []tarEntry{
		{name: "project/", typ: tar.TypeDir, mode: 0o755},
		{name: "project/a.txt", body: "new\n", typ: tar.TypeReg, mode: 0o644},
	})
	if _, err := s.Reimport(archive, []string{"a.txt"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.Upper(), "partial")); err == nil {
		t.Errorf("Reimport kept what an import cut short wrote")
	}
	if !s.Imported() {
		t.Errorf("Reimport did not mark the session imported")
	}
	if _, err := s.Apply(context.Background()); err != nil {
		t.Fatalf("Apply after the import: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "a.txt")); string(b) != "new\n" {
		t.Errorf("a.txt after apply: %q", b)
	}
}
