package contract

import (
	"encoding/json"
	"errors"
	"fmt"
)

// StatusPath is where the entrypoint gives its own account of the session,
// in the container's root filesystem: written by root before the privilege
// drop (the file and /run/aisb are root's, mode 0644 and 0755), then only
// through a descriptor that is closed on exec. The command, as uid 1000,
// can neither write it nor replace it; aisb reads it from the stopped
// container through the Podman API before removing it.
const StatusPath = "/run/aisb/entrypoint.status"

// Outcomes the entrypoint reports.
const (
	OutcomeStarted    = "started"    // the sequence began and went no further
	OutcomeEnforced   = "enforced"   // the table is installed and verified; the command ran
	OutcomeUnenforced = "unenforced" // --allow-unenforced and the table failed; the command ran without it
	OutcomeOpen       = "open"       // network mode open: no table by design; the command ran
	OutcomeFailed     = "failed"     // the command did not run; Code says why
)

// Status is the entrypoint's account of itself.
type Status struct {
	Outcome string `json:"outcome"`
	Code    int    `json:"code,omitempty"` // the entrypoint's exit status when Outcome is failed
	Step    string `json:"step,omitempty"` // the step that failed (also for unenforced)
}

// Ran reports whether the command was started, so that the exit status is
// the command's own.
func (s Status) Ran() bool {
	return s.Outcome == OutcomeEnforced || s.Outcome == OutcomeUnenforced || s.Outcome == OutcomeOpen
}

// ErrBadStatus is returned for a status file that is not one the entrypoint writes.
var ErrBadStatus = errors.New("not an entrypoint status")

// ParseStatus reads a status file strictly.
func ParseStatus(b []byte) (Status, error) {
	var s Status
	if len(b) > 4096 {
		return s, fmt.Errorf("%w: %d bytes", ErrBadStatus, len(b))
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%w: %v", ErrBadStatus, err)
	}
	switch s.Outcome {
	case OutcomeStarted, OutcomeEnforced, OutcomeUnenforced, OutcomeOpen, OutcomeFailed:
	default:
		return s, fmt.Errorf("%w: outcome %q", ErrBadStatus, s.Outcome)
	}
	return s, nil
}
