package main

// The one JSON encoder of every --json output: what aisb prints as JSON
// carries names the agent chose (hosts, paths, volume contents) and is read
// on terminals, so every character outside printable ASCII is escaped.
// TestJSONOnlyThroughOneEncoder keeps every other cmd/aisb file from
// encoding JSON for output on its own.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// writeJSON writes v as one line of JSON, ASCII only.
func writeJSON(w io.Writer, v any) error { return writeASCIIJSON(w, v, false) }

// encodeEach writes one JSON object per line: the --json form of every
// command that reads state.
func encodeEach[T any](w io.Writer, items []T) error {
	for _, it := range items {
		if err := writeJSON(w, it); err != nil {
			return err
		}
	}
	return nil
}

// errNotJSON is a line given to writeJSONLine that is not JSON.
var errNotJSON = errors.New("not a JSON text")

// writeJSONLine writes a JSON text read from a file (an audit line) as one
// line, ASCII only; its bytes are otherwise as they were.
func writeJSONLine(w io.Writer, line []byte) error {
	line = bytes.TrimRight(line, "\r\n")
	if !json.Valid(line) {
		return errNotJSON
	}
	_, err := w.Write(append(asciiJSON(line), '\n'))
	return err
}

// writeASCIIJSON encodes v with every character outside printable ASCII
// escaped (\uXXXX): the agent's names and diff lines can hold DEL, C1
// controls or bidirectional overrides, which encoding/json leaves raw and a
// terminal showing the JSON would act on.
func writeASCIIJSON(w io.Writer, v any, indent bool) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(asciiJSON(buf.Bytes()))
	return err
}

// asciiJSON rewrites valid JSON text with every rune from DEL up as
// \uXXXX, surrogate pairs above the basic plane, and a byte that is not
// UTF-8 as \ufffd (as encoding/json decodes it). Outside strings there are
// none; inside them, valid JSON holds no raw control character below DEL.
func asciiJSON(b []byte) []byte {
	var out bytes.Buffer
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r < 0x7f:
			out.WriteByte(b[0])
		case r <= 0xffff:
			fmt.Fprintf(&out, `\u%04x`, r)
		default:
			r -= 0x10000
			fmt.Fprintf(&out, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		}
		b = b[n:]
	}
	return out.Bytes()
}
