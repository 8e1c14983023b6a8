package sandbox

// A sandbox on an engine that is not local (Options.Remote): nothing of
// this host is mounted. The session policy is copied into the created
// container at contract.PolicyDir (root's, read-only to the agent, as the
// mount is locally), the gate's word that it is ready is copied in the
// same way once the sandbox runs (TellGateReadyIn), and the project is a
// volume on the engine's host, filled by an archive copy of the project
// (project.Archive) before the sandbox starts, unless the engine was shown
// to see the project at the same path (sharedpath.go, SharedProject):
// then it is bind-mounted as on a local engine.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/project"
)

// policyFiles is the session policy in o.PolicyDir as the files copied
// into the created sandbox: its directory and the policy, root's.
func policyFiles(policyDir string) ([]File, error) {
	b, err := os.ReadFile(filepath.Join(policyDir, contract.PolicyFile))
	if err != nil {
		return nil, fmt.Errorf("session policy: %w", err)
	}
	return []File{{Path: contract.PolicyDir, Mode: 0o755, Dir: true}, {Path: contract.PolicyPath, Mode: 0o644, Content: b}}, nil
}

// CopyOutProject writes the exited sandbox's project (its volume) to w as
// a tar archive, its entries under "project/".
func CopyOutProject(c engine.Engine, session string, w io.Writer) error {
	return c.ContainerCopyOut(context.TODO(), ContainerName(session), project.ProjectInContainer, w)
}

// TellGateReadyIn is TellGateReady for a sandbox on an engine that is not
// local: the word is copied into the running sandbox's policy directory.
func TellGateReadyIn(c engine.Engine, session string) error {
	dir := strings.TrimPrefix(contract.PolicyDir, "/")
	if err := copyIn(c, ContainerName(session), []*tar.Header{
		{Name: dir + "/" + contract.GateReadyFile, Mode: 0o644, Typeflag: tar.TypeReg},
	}, [][]byte{nil}); err != nil {
		return fmt.Errorf("tell the sandbox its gate is ready: %w", err)
	}
	return nil
}

// copyIn copies the entries (root's) into the container name at /.
func copyIn(c engine.Engine, name string, hdrs []*tar.Header, contents [][]byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, h := range hdrs {
		h.ModTime, h.Format = time.Now(), tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(contents[i]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return c.ContainerCopyIn(context.TODO(), name, "/", &buf, engine.CopyOptions{Chown: true})
}

// copyProject fills the created sandbox's project volume with the project
// (owned by the agent), streamed as it is read.
func copyProject(c engine.Engine, name, dir string, trace func(string), copied func([]string) error) error {
	start := time.Now()
	pr, pw := io.Pipe()
	stats := make(chan project.ArchiveStats, 1)
	go func() {
		st, err := project.Archive(context.TODO(), dir, pw, contract.AgentUID, contract.AgentGID)
		stats <- st
		pw.CloseWithError(err)
	}()
	err := c.ContainerCopyIn(context.TODO(), name, project.ProjectInContainer, pr, engine.CopyOptions{KeepOwners: true})
	pr.CloseWithError(io.ErrClosedPipe)
	st := <-stats
	if err != nil {
		return fmt.Errorf("copy the project to the engine: %w", err)
	}
	if copied != nil {
		if err := copied(st.Paths); err != nil {
			return fmt.Errorf("copy the project to the engine: %w", err)
		}
	}
	how := "everything"
	if st.Ignored {
		how = "what git does not ignore"
	}
	trace(fmt.Sprintf("project copied to the engine (%s: %d files, %d directories, %d links, %.1f MB) in %.1f ms",
		how, st.Files, st.Dirs, st.Links, float64(st.Bytes)/1e6, float64(time.Since(start).Microseconds())/1000))
	return nil
}
