package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// EventCapped is the one event written when a session's audit reached its
// cap: later decisions of that session are not recorded.
const EventCapped = "audit_capped"

// AuditLimits bound the audit on disk; zero means no bound.
type AuditLimits struct {
	Session int64 // one session's (or long-lived gate's) audit file
	Total   int64 // every audit file together
}

// cappedReserve is kept free under the cap for the capped event itself.
const cappedReserve = 512

// CapAudit wraps the audit file w, which already holds size bytes: whole
// lines pass until the next would take the file past max; then one
// EventCapped event is written and every later line is dropped.
func CapAudit(w io.Writer, size, max int64, session string) io.Writer {
	return &cappedWriter{w: w, n: size, max: max, session: session}
}

type cappedWriter struct {
	w       io.Writer
	n, max  int64
	capped  bool
	session string
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if c.capped {
		return len(p), nil
	}
	if c.max > 0 && c.n+int64(len(p)) > c.max-cappedReserve {
		c.capped = true
		line, _ := json.Marshal(Event{Time: time.Now().UTC(), Session: c.session, Event: EventCapped, Rule: "audit_cap", Host: "-", Bytes: c.max})
		_, err := c.w.Write(append(line, '\n'))
		return len(p), err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// endsCapped reports whether the audit file at path ends with the capped
// event: an audit continued by another follower (StartFollow from an offset)
// stays capped.
func endsCapped(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return false
	}
	buf := make([]byte, min(fi.Size(), 4096))
	if _, err := f.ReadAt(buf, fi.Size()-int64(len(buf))); err != nil {
		return false
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	var e Event
	return json.Unmarshal([]byte(lines[len(lines)-1]), &e) == nil && e.Event == EventCapped
}

// PruneAudit removes the oldest audit files of dir (never keep) until all
// of them together take at most total bytes.
func PruneAudit(dir string, total int64, keep string) error {
	if total <= 0 {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("prune audit: %w", err)
	}
	type file struct {
		path string
		size int64
		mod  time.Time
	}
	var files []file
	var sum int64
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		files = append(files, file{filepath.Join(dir, e.Name()), info.Size(), info.ModTime()})
		sum += info.Size()
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.Before(files[j].mod) })
	for _, f := range files {
		if sum <= total {
			break
		}
		if f.path == keep {
			continue
		}
		if err := os.Remove(f.path); err == nil {
			sum -= f.size
			os.Remove(strings.TrimSuffix(f.path, ".jsonl") + ".finishing")
		}
	}
	return nil
}
