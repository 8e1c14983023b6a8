package review

import "golang.org/x/sys/unix"

// oPath opens a descriptor that only names a file (O_PATH): enough to
// resolve below it and fstat it, never to read it.
const oPath = unix.O_PATH

// hostSupported says whether this system has what review needs: Linux has.
func hostSupported() error { return nil }

func renameNoReplace(fromDir int, from string, toDir int, to string) error {
	return unix.Renameat2(fromDir, from, toDir, to, unix.RENAME_NOREPLACE)
}

func syncfs(fd int) error { return unix.Syncfs(fd) }
