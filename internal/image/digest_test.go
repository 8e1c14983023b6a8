package image

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// later is a clock past the racy window of files the test just wrote.
func later() time.Time { return time.Now().Add(racyWithin + time.Second) }

func writeInput(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "input")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// plant replaces the sum of a remembered digest, keeping its identity, so a
// test can tell a remembered digest from a computed one.
func plant(t *testing.T, entry string, sum [32]byte) {
	t.Helper()
	b, err := os.ReadFile(entry)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	f[len(f)-1] = hex.EncodeToString(sum[:])
	if err := os.WriteFile(entry, []byte(strings.Join(f, " ")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDigestIsTheContentsSHA256(t *testing.T) {
	p := writeInput(t, "entrypoint bytes")
	f, err := Digest(p, "")
	if err != nil {
		t.Fatal(err)
	}
	if f.Sum != sha256.Sum256([]byte("entrypoint bytes")) || f.Size != 16 || f.Path != p {
		t.Errorf("Digest = %+v", f)
	}
	if _, err := Digest(t.TempDir(), ""); err == nil {
		t.Error("a directory was hashed as an input file")
	}
}

// TestDigestRemembered: a digest is remembered under the file's identity
// and used while the file is unchanged; any write to the file (its
// modification time set back too) is seen, and the file hashed again.
func TestDigestRemembered(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "digests")
	p := writeInput(t, "version one")
	first, err := digest(p, cache, later)
	if err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(cache, cacheKey(p))
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("no digest remembered: %v", err)
	}
	// The control: a remembered digest is what Digest returns.
	bogus := sha256.Sum256([]byte("bogus"))
	plant(t, entry, bogus)
	if f, err := digest(p, cache, later); err != nil || f.Sum != bogus {
		t.Fatalf("the remembered digest was not used: %+v, %v", f, err)
	}
	// The same size, the modification time put back: only the change
	// time moved. (Kernels before 6.13 stamp changes with a clock that
	// ticks every few ms: the write is repeated until the stamp moves.)
	fi, _ := os.Stat(p)
	before := ctime(t, p)
	for i := 0; ctime(t, p) == before; i++ {
		if i == 200 {
			t.Fatal("the change time never moved")
		}
		time.Sleep(time.Millisecond)
		if err := os.WriteFile(p, []byte("version two"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	f, err := digest(p, cache, later)
	if err != nil {
		t.Fatal(err)
	}
	if f.Sum != sha256.Sum256([]byte("version two")) {
		t.Errorf("a changed file got a remembered digest (%x; first %x)", f.Sum, first.Sum)
	}
}

// TestDigestNotRememberedWhileRacy: a file changed within the racy window
// is hashed each time (a later change could keep its stamps).
func TestDigestNotRememberedWhileRacy(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "digests")
	p := writeInput(t, "fresh")
	// Its modification time set back: the change time still says now.
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	if _, err := Digest(p, cache); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cache, cacheKey(p))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file changed just now had its digest remembered (%v)", err)
	}
}

// TestDigestCacheMustBeOwn: entries in a cache directory others can open,
// or reached through a link, are not used.
func TestDigestCacheMustBeOwn(t *testing.T) {
	bogus := sha256.Sum256([]byte("bogus"))
	want := sha256.Sum256([]byte("content"))

	cache := filepath.Join(t.TempDir(), "digests")
	p := writeInput(t, "content")
	if _, err := digest(p, cache, later); err != nil {
		t.Fatal(err)
	}
	plant(t, filepath.Join(cache, cacheKey(p)), bogus)
	if err := os.Chmod(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if f, err := digest(p, cache, later); err != nil || f.Sum != want {
		t.Errorf("an entry in a cache open to others was used: %x, %v", f.Sum, err)
	}

	// An entry that is a link to a file elsewhere.
	cache2 := filepath.Join(t.TempDir(), "digests")
	if _, err := digest(p, cache2, later); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(cache2, cacheKey(p))
	elsewhere := filepath.Join(t.TempDir(), "entry")
	if err := os.Rename(entry, elsewhere); err != nil {
		t.Fatal(err)
	}
	plant(t, elsewhere, bogus)
	if err := os.Symlink(elsewhere, entry); err != nil {
		t.Fatal(err)
	}
	if f, err := digest(p, cache2, later); err != nil || f.Sum != want {
		t.Errorf("an entry reached through a link was used: %x, %v", f.Sum, err)
	}
}

// TestBuildRefusesChangedInput: a build copies an input only with the
// digest its tag was computed from.
func TestBuildRefusesChangedInput(t *testing.T) {
	p := writeInput(t, "as hashed")
	f, err := Digest(p, "")
	if err != nil {
		t.Fatal(err)
	}
	s := Spec{Name: "aisb-x", Containerfile: []byte("FROM x"), Files: map[string]File{"tool": f}}
	if err := writeContext(t.TempDir(), s); err != nil {
		t.Fatalf("control: the unchanged input: %v", err)
	}
	if err := os.WriteFile(p, []byte("as HASHED"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeContext(t.TempDir(), s); !errors.Is(err, ErrInputChanged) {
		t.Errorf("a changed input was built: %v", err)
	}
}

func ctime(t *testing.T, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ctim.Nano()
}
