//go:build !linux

package review

import "golang.org/x/sys/unix"

// oPath is never used outside Linux: openRoot refuses first.
const oPath = unix.O_RDONLY

// hostSupported: review reads a session's overlay upper layer and applies
// it with Linux's no-follow primitives (O_PATH, renameat2, syncfs); other
// systems lack them, and their engine's files are not on this host anyway
// (a remote engine). openRoot refuses, so nothing below runs.
func hostSupported() error { return ErrHostUnsupported }

func renameNoReplace(int, string, int, string) error { return ErrHostUnsupported }

func syncfs(int) error { return ErrHostUnsupported }
