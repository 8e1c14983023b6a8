package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/aisb-dev/aisb/internal/safefile"
)

// Record is what aisb itself records about a long-lived gate. It lives beside
// the gate's directory (DIR.json), never in it: squid, the first thing to
// parse hostile traffic, can write that directory, so nothing read back from
// there is taken as truth.
type Record struct {
	Port int `json:"port"`
	// Token is the gate's sandbox token (squidconf.Tokens): the sessions
	// that use the gate put it in their proxy URL.
	Token    string `json:"token"`
	Follower string `json:"follower,omitempty"` // the audit follower as "PID:STARTTIME"
	// Engine is the URI of the engine that is not local the gate runs on
	// (longremote.go); "": the local one.
	Engine string `json:"engine,omitempty"`
}

// RecordPath is where a gate with directory dir keeps its Record.
func RecordPath(dir string) string { return dir + ".json" }

// WriteRecord records rec for the gate with directory dir.
func WriteRecord(dir string, rec Record) error {
	b, _ := json.Marshal(rec)
	if err := safefile.Write(RecordPath(dir), b, 0o600); err != nil {
		return fmt.Errorf("record gate: %w", err)
	}
	return nil
}

// ErrNoRecord is returned for a gate aisb has no record of.
var ErrNoRecord = errors.New("no record of this gate")

// ReadRecord reads what WriteRecord recorded.
func ReadRecord(dir string) (Record, error) {
	var info Record
	b, err := safefile.Read(RecordPath(dir), 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return info, ErrNoRecord
	}
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil || info.Port < 1 || info.Port > 65535 || !validToken(info.Token) {
		return info, fmt.Errorf("%s: not a gate record", RecordPath(dir))
	}
	return info, nil
}

// RemoveRecord forgets the gate with directory dir.
func RemoveRecord(dir string) error {
	if err := os.Remove(RecordPath(dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("forget gate: %w", err)
	}
	return nil
}
