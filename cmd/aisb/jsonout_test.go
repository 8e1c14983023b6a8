package main

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostile holds what an agent can put in a name: C1 controls (NEL, CSI),
// bidirectional overrides and isolates, NUL, ESC, DEL, a character above
// the basic plane and a byte that is not UTF-8.
const hostile = "c1\u0085\u009b bidi\u202e\u2066 nul\x00 esc\x1b[2J del\x7f emoji\U0001F600 bad\xff é"

// decodedHostile is hostile as any JSON decoder reads it back.
const decodedHostile = "c1\u0085\u009b bidi\u202e\u2066 nul\x00 esc\x1b[2J del\x7f emoji\U0001F600 bad\uFFFD é"

func assertASCII(t *testing.T, what string, b []byte) {
	t.Helper()
	for i, c := range b {
		if c != '\n' && (c < 0x20 || c > 0x7e) {
			t.Fatalf("%s: byte %#x at %d: %q", what, c, i, b)
		}
	}
}

// TestEncodeEachASCII: the --json lines of aisb state ls, ps, image ls,
// gate ls and doctor (all through encodeEach) are ASCII only and decode to
// the same strings.
func TestEncodeEachASCII(t *testing.T) {
	type item struct {
		Name string   `json:"name"`
		Dirs []string `json:"dirs"`
	}
	var buf bytes.Buffer
	if err := encodeEach(&buf, []item{{Name: hostile, Dirs: []string{hostile}}, {Name: "plain"}}); err != nil {
		t.Fatal(err)
	}
	assertASCII(t, "encodeEach", buf.Bytes())
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %q", len(lines), buf.String())
	}
	var back item
	if err := json.Unmarshal([]byte(lines[0]), &back); err != nil {
		t.Fatalf("%v: %s", err, lines[0])
	}
	if back.Name != decodedHostile || len(back.Dirs) != 1 || back.Dirs[0] != decodedHostile {
		t.Errorf("round trip: %+q, want %q", back, decodedHostile)
	}
	// Control: plain ASCII is what encoding/json writes.
	if want := `{"name":"plain","dirs":null}`; lines[1] != want {
		t.Errorf("plain item: %s, want %s", lines[1], want)
	}
}

// TestAuditJSONASCII: aisb audit --json re-emits the audit's lines, whose
// hosts and methods came from the agent's traffic, ASCII only.
func TestAuditJSONASCII(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_STATE_HOME", home)
	dir := filepath.Join(home, "aisb", "audit")
	os.MkdirAll(dir, 0o700)
	host, _ := json.Marshal(hostile) // as the gate writes it: raw non-ASCII
	line := `{"time":"2026-11-30T10:00:00Z","session":"s1","event":"network_blocked","method":"CONNECT","host":` + string(host) + `,"port":443,"status":403,"rule":"not_allowed"}`
	plain := `{"time":"2026-11-30T10:00:01Z","session":"s1","event":"network_allowed","method":"CONNECT","host":"ok.test","port":443,"status":200,"rule":"allowed"}`
	os.WriteFile(filepath.Join(dir, "s1.jsonl"), []byte(line+"\n"+plain+"\n"), 0o600)
	code, out, errs := runAisb(t, "", "audit", "--json", "--session", "s1")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	assertASCII(t, "audit --json", []byte(out))
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), out)
	}
	var e struct{ Host string }
	if err := json.Unmarshal([]byte(lines[0]), &e); err != nil || e.Host != decodedHostile {
		t.Errorf("round trip: %q (%v), want %q", e.Host, err, decodedHostile)
	}
	// Control: an ASCII line is printed as it was written.
	if lines[1] != plain {
		t.Errorf("plain line: %s, want %s", lines[1], plain)
	}
}

// TestJSONOnlyThroughOneEncoder: no cmd/aisb file but jsonout.go encodes
// JSON (json.NewEncoder, json.Marshal, json.MarshalIndent): every --json
// output goes through the one ASCII-safe encoder.
func TestJSONOnlyThroughOneEncoder(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sources: %v", err)
	}
	banned := map[string]bool{"NewEncoder": true, "Marshal": true, "MarshalIndent": true}
	scanned := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "jsonout.go" {
			continue
		}
		scanned++
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		json := "json"
		for _, imp := range file.Imports {
			if imp.Path.Value == `"encoding/json"` && imp.Name != nil {
				json = imp.Name.Name
			}
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == json && banned[sel.Sel.Name] {
				t.Errorf("%s encodes JSON with %s.%s; use writeJSON or encodeEach (jsonout.go)", f, json, sel.Sel.Name)
			}
			return true
		})
	}
	if scanned < 10 {
		t.Fatalf("scanned %d files: not run in cmd/aisb?", scanned)
	}
}
