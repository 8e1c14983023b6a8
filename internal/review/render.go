package review

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Sorted returns the changes with those flagged as running on the host
// later first, each group in path order.
func Sorted(cs []Change) []Change {
	out := slices.Clone(cs)
	slices.SortStableFunc(out, func(a, b Change) int {
		af, bf := len(a.Flags) > 0, len(b.Flags) > 0
		switch {
		case af && !bf:
			return -1
		case bf && !af:
			return 1
		}
		return strings.Compare(a.Path, b.Path)
	})
	return out
}

var kindMark = map[Kind]string{Added: "A", Modified: "M", Deleted: "D", ModeOnly: "m", Special: "?"}

// Render writes the review for a terminal: flagged changes first, then the
// rest, then (with diffs) each text file's diff. Every name, target and diff
// line the agent wrote is quoted or reduced to printable ASCII.
func Render(w io.Writer, s *Session, cs []Change, diffs bool) {
	fmt.Fprintf(w, "session %s  project %s  (%d changes)\n", s.Meta.Session, Quote(s.Meta.Project), len(cs))
	if s.Meta.Git != "" && strings.HasPrefix(s.Meta.Git, "file:") {
		fmt.Fprintf(w, "note: .git was a file at start (%s): in review mode the sandbox had that repository read-only\n", Printable(s.Meta.Git))
	}
	if len(cs) == 0 {
		fmt.Fprintln(w, "no changes")
		return
	}
	sorted := Sorted(cs)
	flagged := 0
	for _, c := range sorted {
		if len(c.Flags) > 0 {
			flagged++
		}
	}
	if flagged > 0 {
		fmt.Fprintf(w, "\n!! %d change(s) that run on the host later; check these first:\n", flagged)
	}
	for i, c := range sorted {
		if i == flagged {
			if flagged > 0 {
				fmt.Fprintln(w, "\nother changes:")
			}
		}
		line := fmt.Sprintf("  %s %s", kindMark[c.Kind], Quote(c.Path))
		line += detail(c)
		if len(c.Flags) > 0 {
			line = "!" + line[1:] + "  [" + strings.Join(c.Flags, "; ") + "]"
		}
		fmt.Fprintln(w, line)
	}
	if !diffs {
		return
	}
	for _, c := range sorted {
		if len(c.Diff) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n--- a/%s\n+++ b/%s\n", Quote(c.Path), Quote(c.Path))
		for _, l := range c.Diff {
			fmt.Fprintln(w, Printable(l))
		}
	}
}

func detail(c Change) string {
	var parts []string
	if c.OldType != "" && c.OldType != c.Type {
		parts = append(parts, c.OldType+" -> "+c.Type)
	} else if c.Kind != Deleted && c.Type != "file" {
		parts = append(parts, c.Type)
	} else if c.Kind == Deleted && c.Type != "file" {
		parts = append(parts, c.Type)
	}
	if c.OldMode != "" && c.Mode != "" && c.OldMode != c.Mode {
		parts = append(parts, "mode "+c.OldMode+" -> "+c.Mode)
	} else if c.Kind == Added && c.Mode != "" {
		parts = append(parts, "mode "+c.Mode)
	}
	if c.Target != "" {
		parts = append(parts, "-> "+Quote(c.Target))
	}
	if c.NoDiff != "" {
		what := fmt.Sprintf("%d bytes", c.Size)
		if c.SHA256 != "" {
			what += ", sha256 " + shortHash(c.SHA256)
		}
		parts = append(parts, "no diff: "+c.NoDiff, what)
		if c.Kind == Modified && c.OldType == "" {
			was := fmt.Sprintf("was %d bytes", c.OldSize)
			if c.OldSHA256 != "" {
				was += ", sha256 " + shortHash(c.OldSHA256)
			}
			parts = append(parts, was)
		}
	}
	if c.Kind == Deleted && c.Within {
		parts = append(parts, "with its directory")
	}
	if len(parts) == 0 {
		return ""
	}
	return "  (" + strings.Join(parts, ", ") + ")"
}

func shortHash(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}
