package gate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCapAudit(t *testing.T) {
	var buf bytes.Buffer
	w := CapAudit(&buf, 0, 4096, "s1")
	enc := json.NewEncoder(w)
	for i := 0; i < 100; i++ {
		enc.Encode(Event{Session: "s1", Event: EventBlocked, Host: "unlisted.test", Rule: RuleNotListed})
	}
	if buf.Len() > 4096 {
		t.Errorf("the audit grew to %d bytes past its cap of 4096", buf.Len())
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var last Event
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if last.Event != EventCapped || strings.Count(buf.String(), EventCapped) != 1 {
		t.Errorf("want one %s event at the end:\n%s", EventCapped, buf.String())
	}
}

func TestPruneAudit(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	for i, name := range []string{"a.jsonl", "b.jsonl", "c.jsonl", "keep.jsonl"} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, bytes.Repeat([]byte("x"), 1000), 0o600)
		os.Chtimes(p, now, now.Add(time.Duration(i-10)*time.Minute))
	}
	os.Chtimes(filepath.Join(dir, "keep.jsonl"), now, now.Add(-time.Hour)) // oldest, but current
	if err := PruneAudit(dir, 2000, filepath.Join(dir, "keep.jsonl")); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if strings.Join(left, " ") != "c.jsonl keep.jsonl" {
		t.Errorf("left %v, want the newest and the current", left)
	}
}
