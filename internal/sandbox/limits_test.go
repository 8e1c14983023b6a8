package sandbox

import "testing"

// TestCPUQuotaNeverRoundsToNothing: a quota of 0 means no limit to the
// runtime, so a CPU limit that rounds to it is refused, not passed on.
func TestCPUQuotaNeverRoundsToNothing(t *testing.T) {
	for _, cpus := range []float64{0.000001, 0.000009, 0.009} {
		if s, err := Spec(Options{Session: "t", Image: "x", Command: []string{"true"}, Mode: "none", CPUs: cpus}); err == nil {
			t.Errorf("cpus %g: spec built with quota %d", cpus, *s.ResourceLimits.CPU.Quota)
		}
	}
	s, err := Spec(Options{Session: "t", Image: "x", Command: []string{"true"}, Mode: "none", CPUs: 0.01})
	if err != nil || *s.ResourceLimits.CPU.Quota != 1000 {
		t.Errorf("cpus 0.01: %v", err)
	}
}
