package review

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// layer is the agent's upper layer, opened once for a listing or an apply.
// Its files are the user's (the sandbox maps the agent to the user), but
// the agent may have made some unreadable (chmod 000 on a file, on a
// directory, on /project itself): aisb raises such a mode as far as it
// needs to read, remembers what the agent set, and puts it back on Close.
type layer struct {
	*root
	raised []raisedMode // in the order raised: parents before children
	was    map[string]uint32
}

type raisedMode struct {
	rel  string
	mode uint32
}

func openLayer(path string) (*layer, error) {
	r, err := openRoot(path)
	if err != nil {
		return nil, err
	}
	r.layer = true
	return &layer{root: r, was: map[string]uint32{}}, nil
}

// raise gives the owner the need bits (0o400 to read a file, 0o500 to
// list a directory) on rel ("" is the layer's root), whose lstat is st.
func (l *layer) raise(rel string, st *unix.Stat_t, need uint32) error {
	mode := uint32(st.Mode) & 0o7777
	if mode&need == need {
		return nil
	}
	if _, done := l.was[rel]; done {
		return nil
	}
	if err := l.setMode(rel, mode|need); err != nil {
		return fmt.Errorf("read the agent's %s (mode %s): %w", Quote(rel), octal(mode), err)
	}
	l.was[rel] = mode
	l.raised = append(l.raised, raisedMode{rel, mode})
	return nil
}

func (l *layer) setMode(rel string, mode uint32) error {
	if rel == "" {
		// The root's O_PATH descriptor; its /proc link names that inode.
		return unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", l.fd), mode)
	}
	return l.chmod(rel, mode)
}

// Close puts back every mode raised, children first, and closes the layer.
// A path gone since (an apply removes the whole layer) is skipped.
func (l *layer) Close() error {
	defer l.root.Close()
	var first error
	for i := len(l.raised) - 1; i >= 0; i-- {
		r := l.raised[i]
		if err := l.setMode(r.rel, r.mode); err != nil && !absent(err) && first == nil {
			first = fmt.Errorf("put back the agent's mode %s on %s: %w", octal(r.mode), Quote(r.rel), err)
		}
	}
	l.raised = nil
	return first
}

// rootStat is the layer root's own lstat.
func (l *layer) rootStat() (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(l.fd, &st); err != nil {
		return st, &os.PathError{Op: "stat", Path: l.path, Err: err}
	}
	return st, nil
}
