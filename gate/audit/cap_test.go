package audit

import (
	"bytes"
	"context"
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

// TestAuditStaysCapped: an audit continued from an offset (the watchdog
// finishing a session's gate) stays capped: no second capped event, no line
// past the cap.
func TestAuditStaysCapped(t *testing.T) {
	dir := t.TempDir()
	gateDir := t.TempDir()
	line := "aisb1 1764500000.000 s1 127.0.0.1 GET unlisted.test 80 403 0 not_listed\n"
	log := filepath.Join(gateDir, "access.log")
	os.WriteFile(log, []byte(strings.Repeat(line, 100)), 0o600)
	lim := AuditLimits{Session: 4096}
	a, err := OpenAudit(dir, "s1", lim)
	if err != nil {
		t.Fatal(err)
	}
	off, err := StartFollow(context.Background(), log, "s1", a, 0, t.Logf).Handoff()
	if err != nil || off != int64(100*len(line)) {
		t.Fatalf("handoff at %d: %v", off, err)
	}
	a.Close()
	f, _ := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(strings.Repeat(line, 10))
	f.Close()
	a, err = OpenAudit(dir, "s1", lim)
	if err != nil {
		t.Fatal(err)
	}
	if err := StartFollow(context.Background(), log, "s1", a, off, t.Logf).Stop(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, _ := os.ReadFile(filepath.Join(dir, "s1.jsonl"))
	if n := strings.Count(string(b), EventCapped); n != 1 || len(b) > 4096 {
		t.Errorf("%d capped events, %d bytes (cap 4096)", n, len(b))
	}
	// Control: uncapped, the continued follower converts what it finds.
	dir2 := t.TempDir()
	a, _ = OpenAudit(dir2, "s1", AuditLimits{})
	StartFollow(context.Background(), log, "s1", a, off, t.Logf).Stop()
	a.Close()
	if b, _ := os.ReadFile(filepath.Join(dir2, "s1.jsonl")); strings.Count(string(b), "\n") != 10 {
		t.Errorf("continued from %d without a cap: %d lines, want 10", off, strings.Count(string(b), "\n"))
	}
}
