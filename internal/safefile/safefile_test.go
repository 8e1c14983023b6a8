package safefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "f")
	os.WriteFile(regular, []byte("hello"), 0o644)
	if b, err := Read(regular, 5); err != nil || string(b) != "hello" {
		t.Errorf("regular: %q %v", b, err)
	}
	if _, err := Read(regular, 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the cap: %v", err)
	}
	if _, err := Read(filepath.Join(dir, "missing"), 5); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	zero := filepath.Join(dir, "zero")
	os.Symlink("/dev/zero", zero)
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o644)
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	link := filepath.Join(dir, "link")
	os.Symlink(regular, link)
	for path, want := range map[string]error{zero: ErrSymlink, fifo: ErrNotRegular, sub: ErrNotRegular, link: ErrSymlink} {
		done := make(chan error, 1)
		go func() { _, err := Read(path, 1<<20); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", path, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Read hung", path)
		}
	}
	// The user's own files may be links, to regular files only.
	if b, err := ReadFollow(link, 5); err != nil || string(b) != "hello" {
		t.Errorf("ReadFollow of a link: %q %v", b, err)
	}
	if _, err := ReadFollow(zero, 1<<20); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFollow of /dev/zero: %v", err)
	}
}

func TestWriteReplacesLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep"), 0o644)
	path := filepath.Join(dir, "squid.conf")
	os.Symlink(target, path)
	if err := Write(path, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("Write followed the link: target now %q", b)
	}
	if b, err := Read(path, 10); err != nil || string(b) != "new" {
		t.Errorf("after Write: %q %v", b, err)
	}
}
