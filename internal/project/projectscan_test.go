package project

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func listen(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
}

func TestScan(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(root, "tmp", "sockets"), 0o755)
	os.WriteFile(filepath.Join(root, "README"), []byte("x"), 0o644)
	listen(t, filepath.Join(root, "db.sock"))
	listen(t, filepath.Join(root, "tmp", "sockets", "puma\x1b[31m.sock"))
	listen(t, filepath.Join(outside, "docker.sock"))
	os.Mkdir(filepath.Join(outside, "dir"), 0o755)
	listen(t, filepath.Join(outside, "dir", "hidden.sock"))
	// Links are not followed: neither to a socket nor to a directory.
	os.Symlink(filepath.Join(outside, "docker.sock"), filepath.Join(root, "docker.sock"))
	os.Symlink(filepath.Join(outside, "dir"), filepath.Join(root, "linked"))

	r, err := ScanSockets(root, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"db.sock", filepath.Join("tmp", "sockets", "puma\x1b[31m.sock")}
	if !slices.Equal(r.Sockets, want) || r.Count != 2 || !r.Complete() {
		t.Errorf("scan: %+v, want sockets %q", r, want)
	}
	if got := Printable(r.Sockets[1]); got != `"tmp/sockets/puma\x1b[31m.sock"` {
		t.Errorf("printable: %s", got)
	}

	// The project reached through a link is scanned at its target.
	link := filepath.Join(t.TempDir(), "project")
	os.Symlink(root, link)
	if r, err := ScanSockets(link, time.Minute); err != nil || r.Count != 2 {
		t.Errorf("through a link: %+v %v", r, err)
	}
	if _, err := ScanSockets(filepath.Join(root, "missing"), time.Minute); err == nil {
		t.Error("a missing root scanned without error")
	}
}

func TestScanBudget(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < 1000; i++ {
		os.WriteFile(filepath.Join(root, fmt.Sprint(i)), nil, 0o644)
	}
	r, err := ScanSockets(root, 0)
	if err != nil || !r.CutShort || r.Complete() || r.Entries >= 1000 {
		t.Errorf("zero budget: %+v %v", r, err)
	}
	r, err = ScanSockets(root, time.Minute)
	if err != nil || r.CutShort || r.Entries != 1001 {
		t.Errorf("ample budget: %+v %v", r, err)
	}
}

func TestScanCapsTheList(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < MaxSockets+5; i++ {
		listen(t, filepath.Join(root, fmt.Sprintf("%d.sock", i)))
	}
	r, err := ScanSockets(root, time.Minute)
	if err != nil || len(r.Sockets) != MaxSockets || r.Count != MaxSockets+5 {
		t.Errorf("many sockets: %d listed, %d counted, %v", len(r.Sockets), r.Count, err)
	}
}
