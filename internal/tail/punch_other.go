//go:build !linux

package tail

import (
	"errors"
	"os"
)

// punchHole is Linux's fallocate(2) hole punching; elsewhere the followed
// file keeps its blocks (it is still read and passed the same way).
func punchHole(*os.File, int64) error { return errors.ErrUnsupported }
