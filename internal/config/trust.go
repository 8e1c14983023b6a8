package config

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aisb-dev/aisb/internal/safefile"
)

// The trust store holds one JSON object per line, one per trusted project
// file: {"path":…,"sha256":…,"time":…}. JSON escapes every control
// character, so no path can spell a second entry. A file is trusted only
// with exactly the content that was hashed; any edit makes it untrusted.
//
// Stores written by earlier versions hold "sha256:HEX PATH" lines; they are
// still read, and rewritten as JSON at the next change.

// maxStoreSize bounds the trust store aisb reads (about 8000 entries).
const maxStoreSize = 2 << 20

// TrustEntry is one trusted project file.
type TrustEntry struct {
	Path   string    `json:"path"`
	SHA256 string    `json:"sha256"` // lower-case hex
	Time   time.Time `json:"time,omitzero"`
}

// Digest is the lower-case hex SHA-256 of content, as the store records it.
func Digest(content []byte) string {
	sum := sha256.Sum256(content)
	return hex.EncodeToString(sum[:])
}

// ErrTrustStore is wrapped by every error reading or writing the store.
var ErrTrustStore = errors.New("trust store")

// ReadTrustStore returns the store's entries; a missing store has none. A
// line in neither format is skipped with a warning in warnings.
func ReadTrustStore(store string) (entries []TrustEntry, warnings []string, err error) {
	b, err := safefile.ReadFollow(store, maxStoreSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrTrustStore, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), maxStoreSize)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		e, ok := parseTrustLine(line)
		if !ok {
			warnings = append(warnings, fmt.Sprintf("%s:%d: not a trust entry; ignored", store, n))
			continue
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrTrustStore, store, err)
	}
	return entries, warnings, nil
}

func parseTrustLine(line string) (TrustEntry, bool) {
	var e TrustEntry
	if strings.HasPrefix(line, "{") {
		if json.Unmarshal([]byte(line), &e) != nil {
			return e, false
		}
	} else {
		// The old format: "sha256:HEX PATH".
		sum, path, ok := strings.Cut(line, " ")
		hexsum, ok2 := strings.CutPrefix(sum, "sha256:")
		if !ok || !ok2 {
			return e, false
		}
		e = TrustEntry{Path: path, SHA256: hexsum}
	}
	if len(e.SHA256) != 64 || strings.Trim(e.SHA256, "0123456789abcdef") != "" ||
		!filepath.IsAbs(e.Path) || filepath.Base(e.Path) != ProjectFileName {
		return e, false
	}
	return e, true
}

// WriteTrustStore replaces the store with entries, as JSON lines.
func WriteTrustStore(store string, entries []TrustEntry) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, e := range entries {
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("%w: %w", ErrTrustStore, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(store), 0o700); err != nil {
		return fmt.Errorf("%w: %w", ErrTrustStore, err)
	}
	if err := safefile.Write(store, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("%w: %w", ErrTrustStore, err)
	}
	return nil
}

// IsTrusted reports whether the project file at path (absolute), with this
// content, was trusted by the user.
func IsTrusted(store, path string, content []byte) (bool, error) {
	entries, _, err := ReadTrustStore(store)
	if err != nil {
		return false, err
	}
	sum := Digest(content)
	for _, e := range entries {
		if e.Path == path && e.SHA256 == sum {
			return true, nil
		}
	}
	return false, nil
}

// Trust records content as the trusted content of the project file at path
// (absolute), replacing earlier entries for that path.
func Trust(store, path string, content []byte) error {
	entries, _, err := ReadTrustStore(store)
	if err != nil {
		return err
	}
	var keep []TrustEntry
	for _, e := range entries {
		if e.Path != path {
			keep = append(keep, e)
		}
	}
	keep = append(keep, TrustEntry{Path: path, SHA256: Digest(content), Time: time.Now().UTC().Truncate(time.Second)})
	return WriteTrustStore(store, keep)
}

// Revoke removes every entry for path and says how many there were.
func Revoke(store, path string) (int, error) {
	entries, _, err := ReadTrustStore(store)
	if err != nil {
		return 0, err
	}
	var keep []TrustEntry
	for _, e := range entries {
		if e.Path != path {
			keep = append(keep, e)
		}
	}
	n := len(entries) - len(keep)
	if n == 0 {
		return 0, nil
	}
	return n, WriteTrustStore(store, keep)
}
