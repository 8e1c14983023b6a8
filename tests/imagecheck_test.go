package tests

import (
	"strings"
	"testing"
)

// TestBrokenImageNeverCached: a sandbox image whose package step fails
// (here apt-get finds nothing to install, as during a name-resolution
// outage in the build container) fails its build, is never tagged, and so
// a second session builds again instead of finding a broken image. On the
// Containerfile before this test the `update && install && rm` list went
// on past the failed install and the image, lacking fd-find, was cached.
func TestBrokenImageNeverCached(t *testing.T) {
	parallel(t)
	// The base lacks fd-find; its apt-get "updates" fine and installs nothing.
	base := derivedBase(t, "noinstall", `RUN dpkg --remove --force-depends fd-find >/dev/null && `+
		`printf '#!/bin/sh\ncase "$1" in update) exit 0;; esac\necho "E: Unable to locate package" >&2\nexit 100\n' >/usr/bin/apt-get && chmod 755 /usr/bin/apt-get`)
	a := newAisb(t, base, "")
	for i := 0; i < 2; i++ {
		r := a.run(t, "run", "--harness", "shell", "--net", "none", "--", "sh", "-c", "echo command-ran")
		if r.Code == 0 || strings.Contains(r.Stdout, "command-ran") {
			t.Fatalf("run %d: the build should have failed and the command not run: %s", i+1, r)
		}
		if !strings.Contains(r.Stderr, "aisb: building aisb-sandbox-shell failed after") {
			t.Errorf("run %d: stderr does not say the build failed:\n%s", i+1, r.Stderr)
		}
	}
}

// TestImageCheckedBeforeTagged: a package step that "succeeds" without
// installing leaves the image without fd-find; the build's check of what a
// session relies on fails it, naming what is missing.
func TestImageCheckedBeforeTagged(t *testing.T) {
	parallel(t)
	base := derivedBase(t, "fakeinstall", `RUN dpkg --remove --force-depends fd-find >/dev/null && `+
		`printf '#!/bin/sh\nexit 0\n' >/usr/bin/apt-get && chmod 755 /usr/bin/apt-get`)
	a := newAisb(t, base, "")
	r := a.run(t, "run", "--harness", "shell", "--net", "none", "--", "sh", "-c", "echo command-ran")
	if r.Code == 0 || strings.Contains(r.Stdout, "command-ran") {
		t.Fatalf("the build should have failed and the command not run: %s", r)
	}
	if !strings.Contains(r.Stderr, "aisb: the sandbox image lacks fdfind") {
		t.Errorf("stderr does not name what the image lacks:\n%s", r.Stderr)
	}
}

// TestImageCheckControl: the control for both: the same stubbed apt-get on
// a base that lacks nothing builds, and the command runs.
func TestImageCheckControl(t *testing.T) {
	parallel(t)
	base := derivedBase(t, "stubapt", `RUN printf '#!/bin/sh\nexit 100\n' >/usr/bin/apt-get && chmod 755 /usr/bin/apt-get`)
	a := newAisb(t, base, "")
	r := a.run(t, "run", "--harness", "shell", "--net", "none", "--", "sh", "-c", "echo command-ran")
	if r.Code != 0 || !strings.Contains(r.Stdout, "command-ran") {
		t.Fatalf("a base lacking nothing should build and run: %s", r)
	}
}
