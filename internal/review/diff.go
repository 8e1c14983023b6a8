package review

import (
	"fmt"
	"strings"
)

// edit is one line of an edit script: ' ' kept, '-' removed, '+' added.
type edit struct {
	op   byte
	line string
}

// A diff's cost is bounded: Myers' D (its memory grows as D squared) at
// most maxEdits, its line comparisons (about (N+M)*D) at most what is left
// of a listing's maxDiffWork. Past either, no diff is shown: an agent's
// files cannot make aisb review slow.
const (
	maxEdits    = 1000
	maxDiffWork = 200_000_000
)

// diffLines is Myers' O(ND) line diff; ok is false past the bounds, and
// work is what is left of the budget.
func diffLines(a, b []string, work *int64) (script []edit, ok bool) {
	n, m := len(a), len(b)
	max := n + m
	off := max + 1
	limit := maxEdits
	if w := *work / int64(n+m+1); w < int64(limit) {
		limit = int(w)
	}
	v := make([]int, 2*max+3)
	// trace[d] holds v[-d-1 .. d+1] as it was before step d.
	var trace [][]int
	d := 0
	defer func() { *work -= int64(d+1) * int64(n+m+1) }()
	for ; d <= max; d++ {
		if d > limit {
			return nil, false
		}
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(a, b, trace), true
			}
		}
	}
	return backtrack(a, b, trace), true
}

func backtrack(a, b []string, trace [][]int) []edit {
	x, y := len(a), len(b)
	var rev []edit
	for d := len(trace) - 1; d >= 0; d-- {
		t := trace[d]
		at := func(k int) int { return t[k+d+1] }
		k := x - y
		var pk int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := at(pk)
		py := px - pk
		for x > px && y > py {
			rev = append(rev, edit{' ', a[x-1]})
			x--
			y--
		}
		if d > 0 {
			if x == px {
				rev = append(rev, edit{'+', b[y-1]})
			} else {
				rev = append(rev, edit{'-', a[x-1]})
			}
		}
		x, y = px, py
	}
	out := make([]edit, len(rev))
	for i := range rev {
		out[i] = rev[len(rev)-1-i]
	}
	return out
}

// splitLines splits text into lines without their newlines.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	s = strings.TrimSuffix(s, "\n")
	return strings.Split(s, "\n")
}

// Unified returns the unified diff of old and new (3 lines of context), one
// string per line, raw: the caller makes them printable. ok is false when
// the files differ too much for a diff.
func Unified(old, new string) (lines []string, ok bool) {
	work := int64(maxDiffWork)
	return unified(old, new, &work)
}

func unified(old, new string, work *int64) (lines []string, ok bool) {
	script, ok := diffLines(splitLines(old), splitLines(new), work)
	if !ok {
		return nil, false
	}
	const ctx = 3
	// Positions of changed lines in the script.
	var changed []int
	for i, e := range script {
		if e.op != ' ' {
			changed = append(changed, i)
		}
	}
	if len(changed) == 0 {
		return nil, true
	}
	// Line numbers before each script position.
	aLine := make([]int, len(script)+1)
	bLine := make([]int, len(script)+1)
	for i, e := range script {
		aLine[i+1], bLine[i+1] = aLine[i], bLine[i]
		if e.op != '+' {
			aLine[i+1]++
		}
		if e.op != '-' {
			bLine[i+1]++
		}
	}
	for i := 0; i < len(changed); {
		start := max(changed[i]-ctx, 0)
		j := i
		for j+1 < len(changed) && changed[j+1]-changed[j] <= 2*ctx {
			j++
		}
		end := min(changed[j]+ctx+1, len(script))
		aStart, bStart := aLine[start], bLine[start]
		aCount, bCount := aLine[end]-aStart, bLine[end]-bStart
		lines = append(lines, fmt.Sprintf("@@ -%s +%s @@", span(aStart, aCount), span(bStart, bCount)))
		for _, e := range script[start:end] {
			lines = append(lines, string(e.op)+e.line)
		}
		i = j + 1
	}
	return lines, true
}

// span is a hunk range as diff prints it: 1-based start, count when not 1.
func span(start, count int) string {
	if count == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if count == 1 {
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}
