package main

import (
	"bytes"
	"encoding/json"
	"testing"
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
