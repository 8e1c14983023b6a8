package config

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"

	"github.com/aisb-dev/aisb/internal/allowlist"
)

// ProjectFileName is the project's own configuration, in the project directory.
const ProjectFileName = ".aisb.toml"

// Sources names where configuration comes from, lowest precedence first.
type Sources struct {
	UserFile   string // the user's file; a missing file is the defaults
	ProjectDir string // the project directory; its .aisb.toml may be missing
	TrustFile  string // the store `aisb trust` writes
}

// Resolved is the effective configuration and how it came to be.
type Resolved struct {
	Config Config // Network.AllowedHosts is empty: the list is Allowlist
	// Allowlist is the one allowlist: the files', narrowed or merged, plus
	// --allow, plus (after JoinHarness) the harness's hosts.
	Allowlist []allowlist.Host
	// SSHHosts are the names SSH may reach on port 22 through the gate.
	SSHHosts []allowlist.Host
	// HarnessHosts are the entries JoinHarness added, for display.
	HarnessHosts []allowlist.Host
	// Notices say what was ignored and why; the CLI prints them on stderr.
	Notices []string
	// ProjectFile is the project's file when there is one (trusted or not).
	ProjectFile *File
}

// Widens lists what the project file f would add to the configuration in
// userFile if it were trusted, one "field value" per entry; nothing when it
// only narrows.
func Widens(userFile string, f *File) ([]string, error) {
	r, err := Resolve(Sources{UserFile: userFile})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range r.project(f, false) {
		if s.ignored != nil {
			out = append(out, s.ignored.field)
		}
	}
	return out, nil
}

// Resolve merges the defaults, the user's file and the project's file. A
// project file that the user has not trusted (`aisb trust`) may only narrow:
// what it would widen is ignored with a notice.
func Resolve(src Sources) (*Resolved, error) {
	r := &Resolved{Config: Default()}
	if src.UserFile != "" {
		f, err := ReadFile(src.UserFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			r.merge(f)
		}
	}
	if src.ProjectDir != "" {
		path, err := filepath.Abs(filepath.Join(src.ProjectDir, ProjectFileName))
		if err != nil {
			return nil, err
		}
		f, err := ReadProjectFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			if err := refuseProjectSecrets(f, src.UserFile); err != nil {
				return nil, err
			}
			trusted, err := IsTrusted(src.TrustFile, path, f.Content)
			if err != nil {
				return nil, err
			}
			r.ProjectFile = f
			for _, s := range r.project(f, trusted) {
				if w := s.ignored; w != nil {
					r.Notices = append(r.Notices, fmt.Sprintf("%s: %s ignored: %s; run `aisb trust` to accept this file as it is", f.Name, w.field, w.why))
				} else {
					r.Notices = append(r.Notices, s.notice)
				}
			}
		}
	}
	return r, nil
}

// merge lays every key the file defines over the configuration.
func (r *Resolved) merge(f *File) {
	for _, fd := range fields {
		if fd.merge != nil {
			fd.merge(r, f)
		}
	}
}

// project lays a project file over the configuration: merged when the user
// trusts it, narrowed when not, and narrowed even when trusted where the
// field says so. It returns what narrowing said, in field order.
func (r *Resolved) project(f *File, trusted bool) []said {
	n := &narrowing{f: f}
	for _, fd := range fields {
		switch {
		case fd.userOnly != "":
			// Never taken from a project file: Resolve refuses a file
			// that sets one (refuseProjectSecrets) before this.
		case trusted && !fd.narrowTrusted:
			if fd.merge != nil {
				fd.merge(r, f)
			}
		case fd.narrow != nil:
			fd.narrow(r, f, n)
		}
	}
	return n.said
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
