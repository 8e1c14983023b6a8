package live

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aisb-dev/aisb/gate/squidconf"
)

// PrepareHelperDir creates dir (0700, the user's alone) holding a copy of the
// helper binary; the session's helper socket is created there too, and the
// gate mounts it read-only.
func PrepareHelperDir(dir, helper string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("helper directory: %w", err)
	}
	src, err := os.Open(helper)
	if err != nil {
		return fmt.Errorf("helper: %w", err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(dir, squidconf.HelperProgram), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return fmt.Errorf("helper: %w", err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return fmt.Errorf("helper: %w", err)
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("helper: %w", err)
	}
	return nil
}
