//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"runtime"
)

// openBeneath needs Linux's openat2; elsewhere ReadUpperStatus fails with
// errNoUpper and the status comes through the archive copy (as it does for
// any Podman whose storage is not on this host).
func openBeneath(int, string) (int, error) {
	return -1, fmt.Errorf("openat2 on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
