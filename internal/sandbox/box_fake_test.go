package sandbox

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/engine/enginefake"
)

func fakeOptions(t *testing.T) Options {
	return Options{
		Session: "s1", Image: "localhost/aisb-sandbox-x:1", ProjectDir: t.TempDir(), PolicyDir: t.TempDir(),
		Command: []string{"true"}, Mode: contract.ModeAllow, Helper: Pasta, Owner: "1:1",
		Files: []File{{Path: "/etc/aisb-note", Content: []byte("hi\n"), Mode: 0o644}},
		Logf:  t.Logf, Stdin: bytes.NewReader(nil), Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer),
	}
}

// withoutInspects drops the inspects, which the status plan makes beside
// the attach and the start, in no fixed order.
func withoutInspects(log []string) []string {
	return slices.DeleteFunc(log, func(s string) bool { return strings.HasPrefix(s, string(enginefake.ContainerInspect)+" ") })
}

// TestRunAgainstTheFake: a sandbox's calls to Podman, in their order,
// and the entrypoint's status read by the archive copy.
func TestRunAgainstTheFake(t *testing.T) {
	f := enginefake.New()
	f.ExitOnStart(enginefake.Kind("sandbox"), 3)
	f.Files(enginefake.Kind("sandbox"), map[string][]byte{contract.StatusPath: []byte(`{"outcome":"enforced"}`)})
	e, err := Run(f, fakeOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if e.Code != 3 || e.StatusErr != nil || e.Status.Outcome != contract.OutcomeEnforced {
		t.Errorf("exit %+v", e)
	}
	want := []string{
		"ContainerCreate sandbox aisb-s1", "ContainerCopyIn sandbox aisb-s1 /", "ContainerAttach sandbox aisb-s1",
		"ContainerStart sandbox aisb-s1", "ContainerWait sandbox aisb-s1", "ContainerCopyOut sandbox aisb-s1 " + contract.StatusPath,
		"ContainerRemove sandbox aisb-s1",
	}
	if got := withoutInspects(f.Log()); !slices.Equal(got, want) {
		t.Errorf("calls:\n%q\nwant\n%q", got, want)
	}
	if names := f.ContainerNames(); len(names) != 0 {
		t.Errorf("left behind: %q", names)
	}
}

// TestRunStartFails: a failed start removes the sandbox and says so.
func TestRunStartFails(t *testing.T) {
	f := enginefake.New()
	boom := errors.New("boom")
	f.Fail(enginefake.ContainerStart, enginefake.Kind("sandbox"), boom)
	if _, err := Run(f, fakeOptions(t)); !errors.Is(err, boom) {
		t.Fatalf("run: %v, want boom", err)
	}
	if names := f.ContainerNames(); len(names) != 0 {
		t.Errorf("left behind: %q", names)
	}
}
