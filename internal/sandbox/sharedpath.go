package sandbox

// Whether an engine that is not local sees the project at the same path
// (podman machine shares the Mac's home into its VM; another host does
// not): found out through the engine's API, never assumed. aisb writes a
// marker holding a fresh random token into the project (O_EXCL, removed
// right after, on every path), and a short-lived container on the engine,
// with the project bind-mounted as the sandbox's would be and running as
// the agent's user, copies the marker to a reply beside it. Shared only if
// the reply is here, a regular file with the token, and owned by this
// process's uid: the container read what only this directory holds, what
// it wrote reached this side, and the agent's files will be the user's
// (to review, change and remove). A directory that merely has the same
// name there has no marker with this token, so a wrong "yes" cannot
// happen; a wrong "no" costs a copy of the project.
//
// The gate's probe is not reused for it: the gate's container would then
// have the project mounted for its whole life beside squid, which must see
// nothing of it.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

// PathCheck describes CheckSharedPath's container.
type PathCheck struct {
	Session    string
	Owner      string
	Image      string // the sandbox's image (it has sh and cat)
	ProjectDir string // links resolved
	Timeout    time.Duration
}

// PathVerdict is what CheckSharedPath found.
type PathVerdict struct {
	Shared bool
	Why    string // how it was shown, or what failed
	Took   time.Duration
}

// exitNoToken is the check container's exit when the mounted directory
// has no marker of that name.
const exitNoToken = 3

// PathCheckName is the check's container for session.
func PathCheckName(session string) string { return "aisb-pathcheck-" + session }

// PathMarker is the marker's name in the project (its reply adds
// ".reply"); named by the session, so a watchdog whose aisb died during
// the check can remove it.
func PathMarker(session string) string { return ".aisb-pathcheck-" + session }

// projectMount is the project's bind mount at /project, the sandbox's and
// the check's alike.
func projectMount(dir string) spec.Mount {
	opts := []string{"rw"}
	if selinuxEnabled() {
		opts = append(opts, "z")
	}
	return spec.Mount{Type: "bind", Source: dir, Destination: "/project", Options: opts}
}

// CheckSharedPath finds out whether the engine sees o.ProjectDir at the
// same path, writable by the agent as this user. Any failure is a "no",
// with what failed.
func CheckSharedPath(c engine.Engine, o PathCheck) PathVerdict {
	start := time.Now()
	shared, why := checkShared(c, o)
	return PathVerdict{Shared: shared, Why: why, Took: time.Since(start)}
}

func checkShared(c engine.Engine, o PathCheck) (bool, string) {
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return false, fmt.Sprintf("no random token: %v", err)
	}
	token := hex.EncodeToString(tok)
	marker := filepath.Join(o.ProjectDir, PathMarker(o.Session))
	reply := marker + ".reply"
	if err := writeMarker(marker, token); err != nil {
		return false, fmt.Sprintf("aisb cannot write its token into the project: %v", err)
	}
	// Only what aisb made goes (the marker, and the reply beside it).
	defer RemovePathMarkers(o.ProjectDir, o.Session)
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	s, err := pathCheckSpec(o)
	if err != nil {
		return false, err.Error()
	}
	// Removed whatever the create says: a create cut short by the check's
	// timeout may still have made the container on the engine.
	defer engine.Remove(context.Background(), c, s.Name)
	if _, err := c.ContainerCreate(ctx, s); err != nil {
		return false, "a container there cannot mount it: " + termsafe.Printable(err.Error())
	}
	if err := c.ContainerStart(ctx, s.Name); err != nil {
		return false, "a container there mounting it does not start: " + termsafe.Printable(err.Error())
	}
	code, err := c.ContainerWait(ctx, s.Name)
	if err != nil {
		return false, "a container there mounting it did not end: " + termsafe.Printable(err.Error())
	}
	if code == exitNoToken {
		return false, "there is a directory at that path there, but without aisb's token: it is another directory of that name"
	}
	if code != 0 {
		var out firstBytes
		c.ContainerLogs(ctx, s.Name, false, &out, &out)
		return false, fmt.Sprintf("a container there that mounts the path cannot read aisb's token in it or write beside it (exit %d: %s)",
			code, termsafe.Printable(strings.TrimSpace(out.b.String())))
	}
	return judgeReply(reply, token)
}

// pathCheckSpec is the check's container: the sandbox's image, user
// namespace and project mount, the agent's user, no network, no
// capabilities, a read-only root; it copies the marker to the reply.
func pathCheckSpec(o PathCheck) (*specgen.SpecGenerator, error) {
	s := specgen.NewSpecGenerator(o.Image, false)
	s.Name = PathCheckName(o.Session)
	m := "/project/" + PathMarker(o.Session)
	s.Entrypoint = []string{"/bin/sh", "-c", `test -e "$1" || exit ` + strconv.Itoa(exitNoToken) + `; cat -- "$1" >"$2"`, "sh", m, m + ".reply"}
	s.Command = []string{}
	s.User = fmt.Sprintf("%d:%d", contract.AgentUID, contract.AgentGID)
	userns, err := specgen.ParseUserNamespace(userNS)
	if err != nil {
		return nil, err
	}
	s.UserNS = userns
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	s.CapDrop = []string{"ALL"}
	s.NoNewPrivileges = ptr(true)
	s.ReadOnlyFilesystem = ptr(true)
	s.Mounts = []spec.Mount{projectMount(o.ProjectDir)}
	s.Labels = map[string]string{engine.LabelKind: "pathcheck", engine.LabelSession: o.Session, engine.LabelOwner: o.Owner}
	return s, nil
}

// writeMarker creates the marker, never over an existing name.
func writeMarker(path, token string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(token)
	return errors.Join(err, f.Close())
}

// judgeReply says whether the reply proves the path shared.
func judgeReply(reply, token string) (bool, string) {
	f, err := os.OpenFile(reply, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, "a container there read a token at that path but what it wrote there did not appear here: it is another directory of that name"
	}
	if err != nil {
		return false, fmt.Sprintf("what a container there wrote cannot be read here: %v", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false, fmt.Sprintf("what a container there wrote cannot be read here: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, "what a container there wrote is not a regular file here"
	}
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil || string(b) != token {
		return false, "what a container there wrote at that path is not aisb's token: it is another directory of that name"
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return false, fmt.Sprintf("a container there sees the project, but what the agent writes there is uid %d's here, not yours (uid %d): its files would not be yours to review, change or remove", st.Uid, uid)
	}
	return true, fmt.Sprintf("a container there read the token aisb wrote into it, and what it wrote there is here, yours (uid %d)", st.Uid)
}

// RemovePathMarkers removes the check's marker and reply from project dir
// (a missing one is no error): the check's own end, and a watchdog's whose
// aisb died during the check.
func RemovePathMarkers(dir, session string) error {
	var errs []error
	for _, n := range []string{PathMarker(session), PathMarker(session) + ".reply"} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// firstBytes keeps the first 512 bytes written to it.
type firstBytes struct{ b bytes.Buffer }

func (l *firstBytes) Write(p []byte) (int, error) {
	if n := 512 - l.b.Len(); n > 0 {
		l.b.Write(p[:min(n, len(p))])
	}
	return len(p), nil
}
