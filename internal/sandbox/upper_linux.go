package sandbox

import "golang.org/x/sys/unix"

// openBeneath opens rel beneath the directory dir for reading, following
// no link on the way (openat2 resolves it beneath dir, on its mount).
func openBeneath(dir int, rel string) (int, error) {
	return unix.Openat2(dir, rel, &unix.OpenHow{
		// O_NONBLOCK: a FIFO in its place must not hang the reader.
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
}
