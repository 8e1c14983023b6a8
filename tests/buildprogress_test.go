package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// builds lets the build tests, which run side by side, build while no
// other removes images: buildah's look for a cached layer reads every
// image's layers, and an image removed meanwhile failed a test's build
// ("getting top layer info: layer not known"). A test holds it for reading
// from its base's build to its end (its aisb builds then too); removing its
// images takes it for writing.
var builds sync.RWMutex

// buildFile is builds across the test processes of one test user: make
// test's harness lane builds the harness images (minutes) in a process of
// its own beside the shared lane's. Those builds hold it shared; a build
// test removes its images only when it gets it exclusive at once, and
// leaves them otherwise for its process's end (removeDeferred), rather
// than hold its slot of the shared lane while they build.
var buildFile = buildLockFile(filepath.Join(os.TempDir(), "aisb-test-image-builds-"+testhost.User+".lock"))

type buildLockFile string

// hold takes the lock (syscall.LOCK_SH or LOCK_EX, with LOCK_NB or not);
// ok is false when LOCK_NB found it taken.
func (l buildLockFile) hold(how int) (release func(), ok bool, err error) {
	f, err := os.OpenFile(string(l), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return func() { f.Close() }, true, nil
}

var deferred struct {
	sync.Mutex
	tags []string
}

// removeDerived removes the base image tag and the sandbox images aisb
// built on it (buildah records the base).
func removeDerived(tag string) {
	podman := func(args ...string) string {
		out, _ := testhost.UserCommand(context.Background(), append([]string{"podman"}, args...)...).Output()
		return string(out)
	}
	for _, img := range strings.Fields(podman("images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "label=io.aisb.inputs")) {
		if strings.TrimSpace(podman("image", "inspect", "--format", `{{index .Annotations "org.opencontainers.image.base.name"}}`, img)) == tag {
			podman("rmi", img)
		}
	}
	podman("rmi", tag)
}

// removeDeferred removes the images build tests left (TestMain, after the
// tests), once the other processes' builds are over.
func removeDeferred() error {
	deferred.Lock()
	defer deferred.Unlock()
	if len(deferred.tags) == 0 {
		return nil
	}
	release, _, err := buildFile.hold(syscall.LOCK_EX)
	if err != nil {
		return fmt.Errorf("build lock %s: %w", buildFile, err)
	}
	defer release()
	for _, tag := range deferred.tags {
		removeDerived(tag)
	}
	deferred.tags = nil
	return nil
}

// derivedBase builds, as the test user, a base image from the offline one
// with the Containerfile lines given, under a tag of its own removed when
// the test ends (with the sandbox images aisb built on it).
func derivedBase(t *testing.T, name, lines string) string {
	t.Helper()
	testhost.Require(t)
	dir, err := os.MkdirTemp("", "aisb-derived-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	// A marker makes the base, and so the sandbox image on it, new: aisb
	// must really build, not find an image from an earlier run.
	cf := fmt.Sprintf("FROM %s\nRUN echo %d > /etc/aisb-test-derived\n%s\n", testhost.BaseImage, time.Now().UnixNano(), lines)
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(cf), 0o644); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("localhost/aisb-test-%s:%d", name, time.Now().UnixNano())
	builds.RLock()
	if r := testhost.Podman(t, "build", "-q", "-t", tag, dir); r.Code != 0 {
		builds.RUnlock()
		t.Fatalf("build %s: %s", tag, r)
	}
	t.Cleanup(func() {
		builds.Lock()
		defer builds.Unlock()
		release, ok, err := buildFile.hold(syscall.LOCK_EX | syscall.LOCK_NB)
		if err != nil {
			t.Errorf("build lock %s: %v", buildFile, err)
			return
		}
		if !ok {
			t.Logf("another process builds images: %s is removed when the tests end", tag)
			deferred.Lock()
			deferred.tags = append(deferred.tags, tag)
			deferred.Unlock()
			return
		}
		defer release()
		removeDerived(tag)
	})
	id := strings.TrimSpace(testhost.Podman(t, "image", "inspect", "--format", "{{.Id}}", tag).Stdout)
	t.Cleanup(func() {
		// aisb removes a failed build's container: none is left on the base.
		r := testhost.Podman(t, "ps", "--all", "--external", "--no-trunc", "--format", "{{.ID}} {{.ImageID}}")
		for _, l := range strings.Split(r.Stdout, "\n") {
			if f := strings.Fields(l); len(f) == 2 && id != "" && strings.HasPrefix(id, f[1]) {
				t.Errorf("a build left container %s of %s behind", f[0], tag)
			}
		}
	})
	// Cleanups run last first: the test's builds are over before its own
	// removal waits for the others' builds.
	t.Cleanup(builds.RUnlock)
	return tag
}

// TestBuildFailureShowsLog: a failing image build shows its whole log,
// printable (the build's output is file and traffic content), and no
// carriage return where stderr is not a terminal; the command never runs.
func TestBuildFailureShowsLog(t *testing.T) {
	parallel(t)
	// node is the first thing the sandbox's Containerfile runs; this one
	// writes a line with a terminal title escape and fails the build.
	base := derivedBase(t, "badnode", `RUN printf '#!/bin/sh\necho "node-marker \033]0;title\007 end" >&2\nexit 3\n' >/usr/bin/node && chmod 755 /usr/bin/node`)
	a := newAisb(t, base, "")
	r := a.run(t, "run", "--harness", "shell", "--net", "none", "--", "sh", "-c", "echo command-ran")
	if r.Code == 0 || strings.Contains(r.Stdout, "command-ran") {
		t.Fatalf("the build should have failed and the command not run: %s", r)
	}
	for _, want := range []string{
		"aisb: building aisb-sandbox-shell (",            // the steps, one plain line each
		"aisb: building aisb-sandbox-shell failed after", // the failure
		"    node-marker ?]0;title? end",                 // the log, printable
		"    STEP 2/",                                    // the whole log, with its steps,
		": RUN set -e; missing=\"\";",                    // the script of the step that failed
		"aisb: build localhost/aisb-sandbox-shell:",      // and the error
	} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	t.Logf("stderr of the failed build:\n%s", r.Stderr)
	if strings.ContainsAny(r.Stderr, "\x1b\x07\r") {
		t.Errorf("stderr (not a terminal) holds an escape or a carriage return: %q", r.Stderr)
	}
}

// TestBuildQuietUnlessVerbose: a build that succeeds shows its steps and
// how long it took, not its log; with --verbose it shows the log. The
// control for TestBuildFailureShowsLog: a log line there is not one that
// always shows.
func TestBuildQuietUnlessVerbose(t *testing.T) {
	parallel(t)
	for _, verbose := range []bool{false, true} {
		t.Run(fmt.Sprint("verbose=", verbose), func(t *testing.T) {
			// Each a base of its own: each run builds.
			base := derivedBase(t, "quiet", "")
			a := newAisb(t, base, "")
			args := []string{"run", "--harness", "shell", "--net", "none"}
			if verbose {
				args = append(args, "--verbose")
			}
			r := a.run(t, append(args, "--", "echo", "command-ran")...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "command-ran") {
				t.Fatalf("%s", r)
			}
			if !strings.Contains(r.Stderr, "aisb: built aisb-sandbox-shell in ") {
				t.Errorf("no line saying the image was built:\n%s", r.Stderr)
			}
			// The build ends by having Podman prepare the image for the
			// sandbox's user ids (image.prepare), shown as a step of its own
			// and leaving no container behind.
			if !strings.Contains(r.Stderr, "aisb: prepared aisb-sandbox-shell for its containers' user ids in ") {
				t.Errorf("no line saying the image was prepared for its user ids:\n%s", r.Stderr)
			}
			if left := preparedContainers(t, builtTag(t, r.Stderr)); left != "" {
				t.Errorf("the preparation left containers behind: %s", left)
			}
			// "COMMIT" is buildah's log line at the end of every build.
			if got := strings.Contains(r.Stderr, "\nCOMMIT localhost/aisb-sandbox-shell:"); got != verbose {
				t.Errorf("build log shown: %v, want %v (--verbose %v):\n%s", got, verbose, verbose, r.Stderr)
			}
			if steps := strings.Contains(r.Stderr, "aisb: building aisb-sandbox-shell ("); steps == verbose {
				t.Errorf("step lines shown: %v with --verbose %v:\n%s", steps, verbose, r.Stderr)
			}
			if strings.Contains(r.Stderr, "\r") {
				t.Errorf("carriage return where stderr is not a terminal: %q", r.Stderr)
			}
		})
	}
}

// TestBuildProgressTerminal: on a real terminal a build shows one line,
// updated in place with the step and the time, and leaves only the line
// saying it was built: no step lines, no build log.
func TestBuildProgressTerminal(t *testing.T) {
	parallel(t)
	base := derivedBase(t, "tty", "")
	a := newAisb(t, base, "")
	env := []string{"TERM=xterm", "XDG_CONFIG_HOME=" + a.config, "XDG_STATE_HOME=" + a.state, "AISB_BASE_IMAGE=" + base, "CONTAINER_HOST=" + testhost.Service(t)}
	tm := testhost.NewTerminal(t, a.project, env, a.bin+" run --harness shell --net none -- echo command-ran")
	tm.WaitFor("aisb: building aisb-sandbox-shell, ", 2*time.Minute) // the status line
	tm.WaitFor("EXIT=0", 2*time.Minute)
	screen := tm.Screen()
	if !strings.Contains(screen, "aisb: built aisb-sandbox-shell in ") || !strings.Contains(screen, "command-ran") {
		t.Errorf("no line saying the image was built, or the command did not run:\n%s", screen)
	}
	if !strings.Contains(screen, "aisb: prepared aisb-sandbox-shell for its containers' user ids in ") {
		t.Errorf("no line saying the image was prepared for its user ids:\n%s", screen)
	}
	for _, not := range []string{"STEP ", "COMMIT", "aisb: building aisb-sandbox-shell,", "aisb: preparing aisb-sandbox-shell"} {
		if strings.Contains(screen, not) {
			t.Errorf("the terminal still shows %q: the line was not updated in place, or the log was shown:\n%s", not, screen)
		}
	}
	t.Logf("the terminal after the build:\n%s", screen)
}

// builtTag is the tag of the image a build's notices say was built.
func builtTag(t *testing.T, stderr string) string {
	t.Helper()
	_, rest, ok := strings.Cut(stderr, "aisb: building localhost/aisb-sandbox-shell:")
	if !ok {
		t.Fatalf("no build notice in:\n%s", stderr)
	}
	tag, _, _ := strings.Cut(rest, " ")
	return "localhost/aisb-sandbox-shell:" + tag
}

// preparedContainers lists the containers of image an image preparation
// made (image.prepare), any state.
func preparedContainers(t *testing.T, image string) string {
	t.Helper()
	r := testhost.Podman(t, "ps", "--all", "--filter", "label=io.aisb.kind=prepare", "--filter", "ancestor="+image, "--format", "{{.Names}}")
	if r.Code != 0 {
		t.Fatalf("podman ps: %s", r)
	}
	return strings.TrimSpace(r.Stdout)
}
