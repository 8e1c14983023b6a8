//go:build !linux && !darwin

package live

import (
	"errors"
	"fmt"
	"runtime"
)

// peerCred: no known way to ask this system who is at the socket's other
// end, so every connection is refused (fail closed).
func peerCred(int) (peer, error) {
	return peer{}, fmt.Errorf("peer credentials on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
