package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/review"
	"github.com/aisb-dev/aisb/internal/state"
)

// The JSON of a review is ASCII only and still means the same strings:
// names can hold DEL, C1 controls, bidirectional overrides, characters
// above the basic plane and bytes that are not UTF-8.
func TestASCIIJSON(t *testing.T) {
	in := map[string]string{"name": "rtl\u202e del\x7f c1\u009b esc\x1b emoji\U0001F600 bad\xff é"}
	var buf bytes.Buffer
	if err := writeASCIIJSON(&buf, in, true); err != nil {
		t.Fatal(err)
	}
	for i, c := range buf.Bytes() {
		if c != '\n' && (c < 0x20 || c > 0x7e) {
			t.Fatalf("byte %#x at %d: %s", c, i, buf.String())
		}
	}
	var back map[string]string
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	want := "rtl\u202e del\x7f c1\u009b esc\x1b emoji\U0001F600 bad\uFFFD é"
	if back["name"] != want {
		t.Errorf("round trip: %q, want %q", back["name"], want)
	}
}

// --apply waits for every other session of the project to end: one
// without --review writes the project directly.
func TestApplyRefusedWhileTheProjectRuns(t *testing.T) {
	paths := state.Paths{State: t.TempDir()}
	proj := t.TempDir()
	if err := os.MkdirAll(paths.SessionDir("20261130-000000-aaaaaa"), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := review.Begin(paths.SessionDir("20261130-000000-aaaaaa"), review.Meta{Session: "20261130-000000-aaaaaa", Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	if err := noSessionRunsOn(paths, s); err != nil {
		t.Fatalf("nothing runs, yet: %v", err)
	}
	// This test process stands for a running session of another project,
	// then of this one.
	if err := paths.MarkSession("20261130-000001-bbbbbb", t.TempDir(), state.Owner()); err != nil {
		t.Fatal(err)
	}
	if err := noSessionRunsOn(paths, s); err != nil {
		t.Fatalf("another project's session: %v", err)
	}
	if err := paths.MarkSession("20261130-000002-cccccc", s.Meta.Project, state.Owner()); err != nil {
		t.Fatal(err)
	}
	if err := noSessionRunsOn(paths, s); !errors.Is(err, errProjectBusy) || !strings.Contains(err.Error(), "20261130-000002-cccccc") {
		t.Fatalf("a running session of the project: %v", err)
	}
}

// A remote copy's changes that did not all come back into the layer
// (review.RecordImportFailure): aisb review says so before the listing,
// and --apply refuses, leaving the project as it was.
func TestReviewOfAnIncompleteImport(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	paths, err := state.FromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	const id = "20261206-000000-cccccc"
	proj := t.TempDir()
	if err := os.MkdirAll(paths.SessionDir(id), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := review.Begin(paths.SessionDir(id), review.Meta{Session: id, Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(s.Work())
	if err := os.WriteFile(filepath.Join(s.Upper(), "part.txt"), []byte("part\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordImportFailure("the engine's copy ended early; the copy is kept in volume aisb-project-" + id + " on the engine"); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runAisb(t, proj, "review", id)
	if code != 0 || !strings.Contains(out, "part.txt") || !strings.Contains(errs, "WARNING: session "+id+"'s changes could not all be brought back") {
		t.Errorf("aisb review: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	code, _, errs = runAisb(t, proj, "review", "--apply", id)
	if code == 0 || !strings.Contains(errs, "could not all be brought back from the engine's copy (the engine's copy ended early") {
		t.Errorf("aisb review --apply: exit %d, stderr %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(proj, "part.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--apply of an incomplete layer changed the project: %v", err)
	}
}
