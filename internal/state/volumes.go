package state

import "path/filepath"

// VolumeDir holds what aisb records about each harness state volume (last
// use, hashes of its settings files), one JSON file per volume.
func (p Paths) VolumeDir() string { return filepath.Join(p.State, "volumes") }
