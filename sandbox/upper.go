package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/contract"
)

// Reading the entrypoint's status from the stopped container's upper
// directory, a shortcut past the archive copy: the copy makes Podman mount
// the stopped container's storage and run a copier to take out one file
// (~100 ms of every session's start-up on the test host, its largest phase).
//
// Rootless Podman keeps a container's layer in a directory owned by the
// container's root as this host maps it (a subordinate uid), closed to
// others, so the file can be opened only inside Podman's user namespace.
// aisb runs itself there (`nsenter --user` into the namespace of Podman's
// pause process; a few ms), as the status reader: ReadUpperStatus opens the
// file beneath the upper directory and prints it. Any failure (a Podman
// elsewhere, whose paths are not this host's; another storage driver; no
// nsenter; a file not as the entrypoint leaves it) falls back to the copy,
// whose answer is the one that counts.

// errNoUpper says the status cannot be read from the container's upper
// directory on this host.
var errNoUpper = errors.New("no upper directory of the container on this host")

// maxStatus bounds a status file; ParseStatus refuses anything longer.
const maxStatus = 4096

// ReadUpperStatus returns the bytes of the entrypoint's status file beneath
// upper, read in Podman's user namespace (rootUID is the container's root
// as that namespace names it). What the agent wrote into the upper
// directory is not trusted: the path is resolved beneath it without
// following any link, and the file must be a regular file owned by the
// container's root, which the agent, without capabilities, cannot create
// or chown to.
func ReadUpperStatus(upper string, rootUID int) ([]byte, error) {
	if upper == "" || !filepath.IsAbs(upper) || rootUID < 0 {
		return nil, errNoUpper
	}
	dir, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoUpper, err)
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, strings.TrimPrefix(contract.StatusPath, "/"), &unix.OpenHow{
		// O_NONBLOCK: a FIFO in its place must not hang the reader.
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoUpper, err)
	}
	f := os.NewFile(uintptr(fd), contract.StatusPath)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", contract.StatusPath)
	}
	if int(st.Uid) != rootUID {
		return nil, fmt.Errorf("%s is owned by uid %d, not the container's root (%d)", contract.StatusPath, st.Uid, rootUID)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxStatus+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxStatus {
		return nil, fmt.Errorf("%s is longer than %d bytes", contract.StatusPath, maxStatus)
	}
	return b, nil
}

// statusInNamespace runs reader (aisb's status reader: the program and its
// subcommand) in the user namespace of Podman's pause process found in
// runtimeDir, to read the status beneath upper.
func statusInNamespace(reader []string, runtimeDir, upper string, rootUID int) (contract.Status, error) {
	if len(reader) == 0 || runtimeDir == "" {
		return contract.Status{}, errNoUpper
	}
	pid, err := pausePID(runtimeDir)
	if err != nil {
		return contract.Status{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	args := append([]string{"--user", "--target", strconv.Itoa(pid), "--preserve-credentials", "--"}, reader...)
	args = append(args, "--upper", upper, "--root-uid", strconv.Itoa(rootUID))
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limited{&out, maxStatus + 1}, &limited{&errb, 1024}
	cmd.Env = []string{}
	if err := cmd.Run(); err != nil {
		return contract.Status{}, fmt.Errorf("%w: %v: %q", errNoUpper, err, errb.String())
	}
	return contract.ParseStatus(out.Bytes())
}

// pausePID is the pid of rootless Podman's pause process, which holds its
// user namespace, checked to be one of this user's: the namespace's root is
// this user.
func pausePID(runtimeDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(runtimeDir, "libpod", "tmp", "pause.pid"))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errNoUpper, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%w: pause.pid holds %q", errNoUpper, b)
	}
	m, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errNoUpper, err)
	}
	if mapUID(string(m), 0) != os.Getuid() || mapUID(string(m), 1) == 1 {
		return 0, fmt.Errorf("%w: process %d is not in this user's rootless namespace", errNoUpper, pid)
	}
	return pid, nil
}

// mapUID finds nsUID in a uid_map ("inside outside count" per line); -1
// when no line holds it.
func mapUID(m string, nsUID int) int {
	for _, line := range strings.Split(strings.TrimSpace(m), "\n") {
		var in, out, count int
		if _, err := fmt.Sscanf(line, "%d %d %d", &in, &out, &count); err != nil {
			return -1
		}
		if nsUID >= in && nsUID-in < count {
			return out + (nsUID - in)
		}
	}
	return -1
}

// limited is a writer that keeps at most n bytes and then refuses more.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if len(p) > l.n {
		return 0, errors.New("too much output")
	}
	l.n -= len(p)
	return l.w.Write(p)
}
