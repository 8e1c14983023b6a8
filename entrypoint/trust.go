package entrypoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aisb-dev/aisb/contract"
)

// ErrSessionCA is returned when the session CA is not one PEM certificate.
var ErrSessionCA = errors.New("the session CA is not one PEM certificate")

// trustSessionCA appends the session CA to bundle (created, with its
// directory, when the image has none). Runs as root before the drop: the
// agent cannot write the bundle afterwards.
func trustSessionCA(ca []byte, bundle string) error {
	if !contract.IsOneCertificate(string(ca)) {
		return ErrSessionCA
	}
	old, err := os.ReadFile(bundle)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", bundle, err)
	}
	if bytes.Contains(old, bytes.TrimSpace(ca)) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
		return err
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	tmp := bundle + ".aisb-tmp"
	if err := os.WriteFile(tmp, append(old, ca...), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", bundle, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return err
	}
	// The bundle may be a symlink into the image (Debian's is a file); the
	// rename replaces the name the tools open.
	if err := os.Rename(tmp, bundle); err != nil {
		return fmt.Errorf("write %s: %w", bundle, err)
	}
	return nil
}
