package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
//
// The reader is started as the sandbox starts and reads only once told
// the sandbox has exited (pendingRead). It runs on the host beside and
// after the agent, so nothing it runs may be a file the agent could have
// changed: nsenter is taken from the system's own directories, root's and
// closed to others, and aisb's own binary is opened before the sandbox
// starts and run through that descriptor (a project holding aisb's binary,
// or a PATH entry inside the project, is the agent's to write).

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
		return nil, fmt.Errorf("%w: upper %q, root uid %d", errNoUpper, upper, rootUID)
	}
	dir, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoUpper, err)
	}
	defer unix.Close(dir)
	fd, err := openBeneath(dir, strings.TrimPrefix(contract.StatusPath, "/"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoUpper, err)
	}
	f := os.NewFile(uintptr(fd), contract.StatusPath)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", contract.StatusPath, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrStatusFile, contract.StatusPath)
	}
	if int(st.Uid) != rootUID {
		return nil, fmt.Errorf("%w: %s is owned by uid %d, not the container's root (%d)", ErrStatusFile, contract.StatusPath, st.Uid, rootUID)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxStatus+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", contract.StatusPath, err)
	}
	if len(b) > maxStatus {
		return nil, fmt.Errorf("%w: %s is longer than %d bytes", ErrStatusFile, contract.StatusPath, maxStatus)
	}
	return b, nil
}

// ErrStatusFile is a status file that is not as the entrypoint leaves it.
var ErrStatusFile = errors.New("not the entrypoint's status file")

// statusReader runs aisb's status reader in Podman's user namespace. It is
// prepared before the sandbox starts (see the top of this file).
type statusReader struct {
	nsenter string   // from the system's directories
	self    *os.File // aisb's binary, opened before the agent ran
	args    []string // the reader's subcommand
	runDir  string   // the user's runtime directory, where Podman keeps its pause process
}

// nsenterDirs are where nsenter is taken from: the system's, never PATH.
var nsenterDirs = []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"}

// prepareReader opens argv[0] (aisb) and finds nsenter for a Podman of
// this host whose runtime directory is runDir (engine.Conn.LocalRuntimeDir);
// nil when any is missing, and the copy is used.
func prepareReader(argv []string, runDir string) (*statusReader, error) {
	if len(argv) == 0 || runDir == "" {
		return nil, fmt.Errorf("%w: no status reader or no Podman of this host", errNoUpper)
	}
	nsenter, err := systemProgram("nsenter")
	if err != nil {
		return nil, err
	}
	self, err := os.Open(argv[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoUpper, err)
	}
	return &statusReader{nsenter: nsenter, self: self, args: argv[1:], runDir: runDir}, nil
}

func (r *statusReader) close() {
	if r != nil {
		r.self.Close()
	}
}

// systemProgram finds name in nsenterDirs: a regular file of root's that
// only root can change, in a directory only root can change.
func systemProgram(name string) (string, error) {
	for _, d := range nsenterDirs {
		p := filepath.Join(d, name)
		var st, dst unix.Stat_t
		if unix.Stat(p, &st) != nil || unix.Stat(d, &dst) != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Uid == 0 && st.Mode&0o022 == 0 && dst.Uid == 0 && dst.Mode&0o022 == 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no %s of root's in %s", errNoUpper, name, strings.Join(nsenterDirs, ", "))
}

// pendingRead is the status reader started in Podman's user namespace
// while the sandbox runs: it has paid its start (nsenter, aisb's own start:
// some 15 ms) before the sandbox exits, and reads the file only when told,
// after the exit. Closing the pipe without a word ends it having read
// nothing.
type pendingRead struct {
	cmd       *exec.Cmd
	tell      *os.File // the write end of the reader's stdin
	out, errb bytes.Buffer
	done      chan error
}

// readerTimeout bounds the read once the reader is told.
const readerTimeout = 5 * time.Second

// start starts the reader for the status beneath upper in the user
// namespace of Podman's pause process; it waits to be told (read).
func (r *statusReader) start(upper string, rootUID int) (*pendingRead, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: no status reader", errNoUpper)
	}
	pid, err := pausePID(r.runDir, rootUID)
	if err != nil {
		return nil, err
	}
	return startPending(r.command(pid, upper, rootUID))
}

// command is the reader's command line: nsenter from the system's
// directories, into the user namespace of process pid, exec'ing aisb's
// binary as opened before the sandbox started (descriptor 3 in nsenter).
func (r *statusReader) command(pid int, upper string, rootUID int) *exec.Cmd {
	args := append([]string{"--user", "--target", strconv.Itoa(pid), "--preserve-credentials", "--", "/proc/self/fd/3"}, r.args...)
	args = append(args, "--upper", upper, "--root-uid", strconv.Itoa(rootUID), "--when-told")
	cmd := exec.Command(r.nsenter, args...)
	cmd.ExtraFiles = []*os.File{r.self}
	return cmd
}

// startPending starts cmd with an empty environment and a pipe on its
// stdin that read writes to.
func startPending(cmd *exec.Cmd) (*pendingRead, error) {
	p := &pendingRead{cmd: cmd, done: make(chan error, 1)}
	in, tell, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoUpper, err)
	}
	p.tell = tell
	cmd.Stdin = in
	cmd.Stdout, cmd.Stderr = &limited{&p.out, maxStatus + 1}, &limited{&p.errb, 1024}
	cmd.Env = []string{}
	cmd.WaitDelay = time.Second
	// Its own process group: a Ctrl-C at a terminal (no TTY in the
	// sandbox) is forwarded to the agent, and must not end the reader.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	in.Close()
	if err != nil {
		tell.Close()
		return nil, fmt.Errorf("%w: %v", errNoUpper, err)
	}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// read tells the reader to read, now that the sandbox has exited, and
// parses what it printed.
func (p *pendingRead) read() (contract.Status, error) {
	_, werr := p.tell.Write([]byte{'\n'})
	p.tell.Close()
	err := p.wait()
	if err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return contract.Status{}, fmt.Errorf("%w: %v: %q", errNoUpper, err, strings.TrimSpace(p.errb.String()))
	}
	return contract.ParseStatus(p.out.Bytes())
}

// cancel ends a reader that was never told (its pipe closes: it reads
// nothing and exits).
func (p *pendingRead) cancel() {
	if p == nil {
		return
	}
	p.tell.Close()
	p.wait()
}

// wait collects the reader's end, killing it when it takes longer than
// readerTimeout.
func (p *pendingRead) wait() error {
	select {
	case err := <-p.done:
		return err
	case <-time.After(readerTimeout):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("no answer within %s", readerTimeout)
	}
}

// WaitToBeTold blocks the reader until the session says the sandbox has
// exited: one byte on stdin. Anything else (the pipe closed, aisb gone)
// ends it without reading.
func WaitToBeTold(r io.Reader) error {
	var b [1]byte
	if n, _ := r.Read(b[:]); n != 1 {
		return errNotTold
	}
	return nil
}

var errNotTold = errors.New("the session did not ask for the status")

// pausePID is the pid of rootless Podman's pause process, which holds its
// user namespace, checked to be one of this user's that maps the
// container's root (checkRootlessMap).
func pausePID(runtimeDir string, rootUID int) (int, error) {
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
	if err := checkRootlessMap(string(m), os.Getuid(), rootUID); err != nil {
		return 0, fmt.Errorf("%w: process %d: %v", errNoUpper, pid, err)
	}
	return pid, nil
}

// checkRootlessMap says whether a uid_map is that of a rootless Podman
// namespace of user uid: its root is uid, it is not the identity, and it
// maps the container's root (rootUID, as the namespace names it) to a uid
// that is not uid's own.
func checkRootlessMap(m string, uid, rootUID int) error {
	switch {
	case mapUID(m, 0) != uid:
		return errors.New("its root is not this user")
	case mapUID(m, 1) == 1:
		return errors.New("it is the initial namespace")
	case rootUID <= 0 || mapUID(m, rootUID) < 0 || mapUID(m, rootUID) == uid:
		return fmt.Errorf("it does not map the container's root (%d) to a subordinate uid", rootUID)
	}
	return nil
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
