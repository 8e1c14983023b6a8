//go:build stress

package tests

import (
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// This file holds what tests Podman rather than aisb: `make stress` builds
// it (the stress tag), `make test` does not; its tests run alone.

// TestPodmanCreateRaceControl: rootless Podman 5.4 corrupts the keep-id mapping of
// containers created at the same moment through one service (libsubid is
// not safe for concurrent use inside the service: see engine.Create), or
// dies of it. The control sends keep-id creates, sixteen in flight at once,
// straight to a service until the first hit: a container whose uid map
// leaves container uid 0 unmapped (and whose start then fails with
// "doesn't map UID 0"), or the service dying. The same load through
// engine.Create, from three processes at once against a fresh service,
// gives none in three times the creates the control needed (64 to 200
// per process).
//
// The pause process plays no part: the control runs with the namespace's
// pause process long running, the treated service after it was killed, so
// that service set the namespace up itself.
func TestPodmanCreateRaceControl(t *testing.T) {
	p := newOwnPodman(t)
	bin := testhost.Binary(t, "tests/racecreate")
	if p.pausePID() == 0 {
		t.Fatal("no pause process after the image import")
	}

	// The control stops at its first hit; how many creates that takes is
	// heavy-tailed (30, 59 and 695 in three runs of 2026-12-02 on the
	// 2-core VM, and one run of 1,132 in 30 s with none), so it may go on
	// for 90 s before the test gives up.
	control := p.race(t, bin, p.service(t, "control"), 1, "-mode", "raw", "-workers", "16", "-creates", "6000", "-until-hit", "-budget", "90s")[0]
	t.Logf("control, no lock, pause process running: %s", control)
	if control.hits() == 0 {
		t.Fatalf("control: %d keep-id creates sixteen at a time never hit the race within 90 s: on this host the test cannot tell the lock from luck", control.Creates)
	}
	if len(control.Unmapped) > 0 && !strings.Contains(control.StartErr, "doesn't map UID 0") {
		t.Errorf("control: a container with uid 0 unmapped started with %q, not Podman's \"doesn't map UID 0\"", control.StartErr)
	}

	// Three processes of as many creates as the control needed, within
	// bounds that keep the test short.
	each := min(max(64, control.Creates), 200)
	total := treatedRace(t, p, bin, each)
	t.Logf("engine.Create: %d creates, none hit; the control hit after %d", total, control.Creates)
}
