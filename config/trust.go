package config

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The trust store holds one line per trusted project file: "sha256:HEX PATH".
// A file is trusted only with exactly the content that was hashed; any edit
// makes it untrusted again.

func digest(content []byte) string {
	sum := sha256.Sum256(content)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// IsTrusted reports whether the project file at path, with this content, was
// trusted by the user.
func IsTrusted(store, path string, content []byte) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	f, err := os.Open(store)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read trust store: %w", err)
	}
	defer f.Close()
	want := digest(content) + " " + abs
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sc.Text() == want {
			return true, nil
		}
	}
	return false, sc.Err()
}

// Trust validates the project file in dir and records its exact content as
// trusted, replacing an earlier entry for the same path. It returns the file.
func Trust(store, dir string) (*File, error) {
	path, err := filepath.Abs(filepath.Join(dir, ProjectFileName))
	if err != nil {
		return nil, err
	}
	f, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keep []string
	if b, err := os.ReadFile(store); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if line != "" && !strings.HasSuffix(line, " "+path) {
				keep = append(keep, line)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read trust store: %w", err)
	}
	keep = append(keep, digest(f.Content)+" "+path)
	if err := os.MkdirAll(filepath.Dir(store), 0o700); err != nil {
		return nil, fmt.Errorf("write trust store: %w", err)
	}
	tmp := store + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(keep, "\n")+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write trust store: %w", err)
	}
	if err := os.Rename(tmp, store); err != nil {
		return nil, fmt.Errorf("write trust store: %w", err)
	}
	return f, nil
}
