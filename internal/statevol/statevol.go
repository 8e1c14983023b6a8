// Package statevol keeps a harness's state (settings, login, sessions) in a
// Podman named volume per scope, and lists, removes and exports those volumes.
package statevol

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	entitiesTypes "github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/config"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

// Home is the agent's home in the sandbox; the volume's layout mirrors it.
const Home = contract.AgentHome

// Labels on every state volume. The project's path is a label; its hash is
// in the name, so a name never carries a path and stays short.
const (
	KindState    = "state" // engine.LabelKind's value on a state volume
	LabelHarness = "io.aisb.state.harness"
	LabelProject = "io.aisb.state.project" // absent for scope "harness"
	LabelScope   = "io.aisb.state.scope"
	LabelCreated = "io.aisb.state.created" // RFC 3339, UTC
	namePrefix   = "aisb-state-"
)

// ErrNotState is returned for a volume aisb did not create as state.
var ErrNotState = errors.New("not an aisb state volume")

// ErrOtherScope is returned when a volume of the target's name was made for
// another harness, scope or project.
var ErrOtherScope = errors.New("made for another harness, scope or project")

// ErrNoVolume is returned for a name no volume has exactly.
var ErrNoVolume = errors.New("no volume has this exact name")

// ErrNoState is returned for a harness that keeps no state (the shell).
var ErrNoState = errors.New("this harness keeps no state")

// Target is the state volume one session uses.
type Target struct {
	Harness harness.Preset
	Scope   config.StateScope // project or harness; none has no volume
	Project string            // the project directory, absolute
}

// Name is the volume's name: aisb-state-HARNESS for the harness scope,
// aisb-state-HARNESS-HASH for a project, HASH being the first 12 hex digits
// of the SHA-256 of the project's path.
func (t Target) Name() string {
	if t.Scope == config.StateHarness {
		return namePrefix + t.Harness.Name
	}
	sum := sha256.Sum256([]byte(t.Project))
	return namePrefix + t.Harness.Name + "-" + hex.EncodeToString(sum[:6])
}

// owns checks that a volume of the target's name was made for the target:
// the name is derived from it, and the labels must say the same, or the
// volume is not this scope's (a hash collision, a volume made by hand) and
// its content is not handed to this session.
func (t Target) owns(name string, labels map[string]string) error {
	wantProject := ""
	if t.Scope == config.StateProject {
		wantProject = t.Project
	}
	if labels[LabelHarness] != t.Harness.Name || labels[LabelScope] != string(t.Scope) || labels[LabelProject] != wantProject {
		return fmt.Errorf("state volume %s: %w: its labels say harness %s, scope %s, project %s; remove it with aisb state rm %s",
			name, ErrOtherScope, termsafe.Quote(labels[LabelHarness]), termsafe.Quote(labels[LabelScope]), termsafe.Quote(labels[LabelProject]), name)
	}
	return nil
}

// Ensure creates the target's volume when it does not exist and makes
// sure every directory of the harness exists in it, owned by the agent. It
// returns the volume's name and when it was created. img is any local image
// (see withVolume). An existing volume's directories are made again only
// when prepare says so: a mount of a missing subpath fails, and an older
// volume may lack a directory a newer preset adds.
func Ensure(c engine.Engine, t Target, img string, prepare func(created string) bool) (name string, created string, err error) {
	if len(t.Harness.State.Dirs) == 0 {
		return "", "", fmt.Errorf("state for harness %s: %w", t.Harness.Name, ErrNoState)
	}
	if t.Scope != config.StateProject && t.Scope != config.StateHarness {
		return "", "", fmt.Errorf("state scope %q has no volume", t.Scope)
	}
	name = t.Name()
	exists, err := c.VolumeExists(context.TODO(), name)
	if err != nil {
		return "", "", fmt.Errorf("state volume %s: %w", name, err)
	}
	if !exists {
		labels := map[string]string{
			engine.LabelKind: KindState, LabelHarness: t.Harness.Name, LabelScope: string(t.Scope),
			LabelCreated: time.Now().UTC().Format(time.RFC3339),
		}
		if t.Scope == config.StateProject {
			labels[LabelProject] = t.Project
		}
		_, err := c.VolumeCreate(context.TODO(), entitiesTypes.VolumeCreateOptions{Name: name, Label: labels})
		if err != nil {
			return "", "", fmt.Errorf("create state volume %s: %w", name, err)
		}
	}
	v, err := inspect(c, name)
	if err != nil {
		return "", "", err
	}
	if err := t.owns(name, v.Labels); err != nil {
		return "", "", err
	}
	if !exists || prepare(v.Labels[LabelCreated]) {
		if err := copyIn(c, name, img, bytes.NewReader(skeleton(t.Harness.State.Dirs))); err != nil {
			return "", "", err
		}
	}
	return name, v.Labels[LabelCreated], nil
}

// skeleton is a tar of the state directories and their parents.
func skeleton(dirs []string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	for _, d := range dirs {
		var parts []string
		for _, p := range strings.Split(d, "/") {
			parts = append(parts, p)
			dir := strings.Join(parts, "/")
			if seen[dir] {
				continue
			}
			seen[dir] = true
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: time.Now()})
		}
	}
	tw.Close()
	return buf.Bytes()
}

// Mounts are the volume's directories at their places in the agent's home.
func Mounts(name string, st harness.State) []*specgen.NamedVolume {
	var out []*specgen.NamedVolume
	for _, d := range st.Dirs {
		out = append(out, &specgen.NamedVolume{Name: name, Dest: path.Join(Home, d), SubPath: d, Options: []string{"rw", "nosuid", "nodev"}})
	}
	return out
}

// inspect is the state volume named name, exactly. Podman's own CLI takes a
// unique prefix of a volume's name for the name (`podman volume rm
// aisb-state-pi`, with no harness-scope volume, removes the one project
// volume that begins so); its API looks names up exactly today, and aisb
// checks the name it gets back so that it never acts on another volume.
func inspect(c engine.Engine, name string) (*entitiesTypes.VolumeConfigResponse, error) {
	v, err := c.VolumeInspect(context.TODO(), name)
	if err != nil {
		return nil, fmt.Errorf("state volume %s: %w", name, err)
	}
	if v.Name != name {
		return nil, fmt.Errorf("state volume %s: %w (Podman matched %s by its prefix)", name, ErrNoVolume, v.Name)
	}
	if v.Labels[engine.LabelKind] != KindState || !strings.HasPrefix(name, namePrefix) {
		return nil, fmt.Errorf("volume %s: %w", name, ErrNotState)
	}
	return v, nil
}

// Volume is one state volume as `aisb state ls` shows it.
type Volume struct {
	Name    string    `json:"name"`
	Harness string    `json:"harness"`
	Scope   string    `json:"scope"`
	Project string    `json:"project,omitempty"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size"` // bytes on disk, as Podman counts them
	// LastUsed is when the last session with this volume ended (or began,
	// when it never ended); zero when no session used it yet.
	LastUsed time.Time `json:"last_used,omitzero"`
	// SettingsChanged are the settings files the last session added,
	// changed or removed; Unknown when aisb has no record of it.
	SettingsChanged []string `json:"settings_changed"`
	Unknown         bool     `json:"unknown,omitempty"`
}

// List returns every state volume, sorted by name, with what recordDir
// says about its last session.
func List(c engine.Engine, recordDir string) ([]Volume, error) {
	list, err := c.VolumeList(context.TODO(), map[string][]string{"label": {engine.LabelKind + "=" + KindState}})
	if err != nil {
		return nil, fmt.Errorf("list state volumes: %w", err)
	}
	sizes := map[string]int64{}
	if df, err := c.DiskUsage(context.TODO()); err == nil {
		for _, v := range df.Volumes {
			sizes[v.VolumeName] = v.Size
		}
	}
	var out []Volume
	for _, v := range list {
		if !strings.HasPrefix(v.Name, namePrefix) {
			continue
		}
		created, _ := time.Parse(time.RFC3339, v.Labels[LabelCreated])
		vol := Volume{
			Name: v.Name, Harness: v.Labels[LabelHarness], Scope: v.Labels[LabelScope], Project: v.Labels[LabelProject],
			Created: created, Size: sizes[v.Name], SettingsChanged: []string{},
		}
		r, err := readRecord(recordDir, v.Name)
		switch {
		case err != nil || r.Created != v.Labels[LabelCreated]:
			vol.Unknown = true
		default:
			vol.LastUsed = r.LastEnd
			if r.LastEnd.Before(r.LastStart) {
				vol.LastUsed = r.LastStart
			}
			vol.SettingsChanged = append(vol.SettingsChanged, r.Changed...)
		}
		out = append(out, vol)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Export writes the volume's content as a tar to w; img as for Ensure.
func Export(c engine.Engine, name, img string, w io.Writer) error {
	if _, err := inspect(c, name); err != nil {
		return err
	}
	return copyOut(c, name, img, w)
}
