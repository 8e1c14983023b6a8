package bench

import "testing"

// TestVerdict: a figure's verdict follows its goal's direction, and a row
// that could not be measured says so instead of passing.
func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		f    figure
		want string
	}{
		{figure{goal: atMost(1.3, ""), value: 1.3}, "met"},
		{figure{goal: atMost(1.3, ""), value: 1.31}, "missed"},
		{figure{goal: atLeast(0.9, ""), value: 0.9}, "met"},
		{figure{goal: atLeast(0.9, ""), value: 0.89}, "missed"},
		{figure{goal: atMost(1, ""), value: -0.2}, "met"}, // a request faster through the gate
		{figure{goal: noGoal, value: 99}, "—"},
		{figure{goal: atMost(0.5, ""), notRun: "srt is not installed"}, "not run: srt is not installed"},
	} {
		if got := c.f.verdict(); got != c.want {
			t.Errorf("%+v: verdict %q, want %q", c.f, got, c.want)
		}
	}
}
