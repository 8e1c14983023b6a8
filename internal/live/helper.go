package live

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aisb-dev/aisb/gate/squidconf"
)

// FindHelper returns the aisb-gatehelper binary: override ($AISB_GATEHELPER)
// when set, else the one next to the running aisb (where make and go install
// put it).
func FindHelper(override string) (string, error) {
	if override != "" {
		return override, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find aisb-gatehelper: %w", err)
	}
	p := filepath.Join(filepath.Dir(self), squidconf.HelperProgram)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("find aisb-gatehelper: not next to aisb at %s; build it with make, or go install ./cmd/... (or set AISB_GATEHELPER)", p)
	}
	return p, nil
}

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
