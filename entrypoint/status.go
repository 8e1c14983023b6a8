package entrypoint

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/aisb-dev/aisb/contract"
)

// statusWriter keeps the status file open from before the privilege drop;
// each report replaces the whole content.
type statusWriter struct{ f *os.File }

func openStatus(path string) (*statusWriter, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// The directory must be ours and closed to others, or the command could
	// replace the file in it (an image may ship it otherwise).
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() {
		return nil, fmt.Errorf("%s is not a directory owned by uid %d", dir, os.Getuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
	}
	// O_NOFOLLOW: never write through a link; Go opens with O_CLOEXEC, so
	// the command does not inherit the descriptor.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, err
	}
	// A file left by the image or a previous run may carry other modes.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return nil, err
	}
	w := &statusWriter{f: f}
	return w, w.report(contract.Status{Outcome: contract.OutcomeStarted})
}

// report replaces the file's content with s. It is not synced to the disk:
// aisb reads the file on this same kernel once the container has stopped
// (from its upper directory, or through the archive API), where the page
// cache already holds it; a sync would only survive the host's crash, which
// ends the session anyway, and took 1-20 ms per report on an ext4 upper
// directory, twice in every sandbox's start.
func (w *statusWriter) report(s contract.Status) error {
	b, _ := json.Marshal(s)
	if err := w.f.Truncate(0); err != nil {
		return err
	}
	_, err := w.f.WriteAt(append(b, '\n'), 0)
	return err
}
