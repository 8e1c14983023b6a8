package image

import (
	"slices"
	"strings"
	"testing"

	"github.com/aisb-dev/aisb/internal/engine/enginefake"
)

// TestEnsureAgainstTheFake: the first Ensure pulls the missing base, builds
// and prepares the image (a container created and removed); the second
// finds it.
func TestEnsureAgainstTheFake(t *testing.T) {
	f := enginefake.New()
	s := Spec{Name: "aisb-x", Containerfile: []byte("ARG BASE_IMAGE\nFROM $BASE_IMAGE\n"), BaseImage: "docker.io/library/debian:13", UserNS: "keep-id:uid=1000,gid=1000"}
	b := Build{LockDir: t.TempDir(), Logf: t.Logf}
	tag, built, err := Ensure(f, s, b)
	if err != nil || !built || !strings.HasPrefix(tag, "localhost/aisb-x:") {
		t.Fatalf("first Ensure: %s %t %v", tag, built, err)
	}
	var log []string
	for _, c := range f.Calls() {
		log = append(log, string(c.Method)+" "+c.Kind)
	}
	want := []string{"ImageGet ", "ImagePull ", "ImageGet ", "ImageExists ", "ImageExists ", "ImageBuild ", "ContainerCreate prepare", "ContainerRemove prepare"}
	if !slices.Equal(log, want) {
		t.Errorf("calls:\n%q\nwant\n%q", log, want)
	}
	again, built, err := Ensure(f, s, b)
	if err != nil || built || again != tag {
		t.Errorf("second Ensure: %s %t %v", again, built, err)
	}
	list, err := List(f)
	if err != nil || len(list) != 1 || list[0].Tag != tag {
		t.Errorf("List: %+v %v", list, err)
	}
	if names := f.ContainerNames(); len(names) != 0 {
		t.Errorf("left behind: %q", names)
	}
}
