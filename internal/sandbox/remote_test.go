package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/engine/enginefake"
	"github.com/aisb-dev/aisb/internal/project"
)

func remoteOptions(t *testing.T) Options {
	o := fakeOptions(t)
	o.Remote, o.ProjectVolume = true, "aisb-project-s1"
	if err := os.WriteFile(filepath.Join(o.PolicyDir, contract.PolicyFile), []byte(`{"version":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(o.ProjectDir, "main.go"), []byte("package main\n"), 0o644)
	return o
}

// TestRemoteSpecMountsNothing: on an engine that is not local the sandbox
// mounts nothing of this host; the project is its volume; and what only a
// bind mount could carry is refused.
func TestRemoteSpecMountsNothing(t *testing.T) {
	o := remoteOptions(t)
	s, err := Spec(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Mounts) != 0 || len(s.OverlayVolumes) != 0 {
		t.Errorf("a remote sandbox mounts %+v %+v", s.Mounts, s.OverlayVolumes)
	}
	if len(s.Volumes) != 1 || s.Volumes[0].Name != "aisb-project-s1" || s.Volumes[0].Dest != project.ProjectInContainer {
		t.Errorf("volumes %+v, want the project's", s.Volumes)
	}
	for _, bad := range []func(*Options){
		func(o *Options) { o.AgentSock = "/tmp/agent.sock" },
		func(o *Options) { o.GitDirs = []project.GitMount{{Source: "/x", Dest: "/y"}} },
		func(o *Options) { o.Overlay = &Overlay{Upper: "/u", Work: "/w"} },
		func(o *Options) { o.ProjectVolume = "" },
	} {
		o := remoteOptions(t)
		bad(&o)
		if _, err := Spec(o); err == nil {
			t.Errorf("Spec of %+v: no error", o)
		}
	}
}

// TestRemoteCreateCopies: the policy goes in with the sandbox's files in
// one copy, the project into its volume in another, before the attach.
func TestRemoteCreateCopies(t *testing.T) {
	f := enginefake.New()
	b, err := Create(f, remoteOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := f.Container("aisb-s1")
	if string(c.Files[contract.PolicyPath]) != `{"version":1}` || string(c.Files["/etc/aisb-note"]) != "hi\n" {
		t.Errorf("files in the sandbox: %q", c.Files)
	}
	b.Remove()
	want := []string{"ContainerCreate sandbox aisb-s1", "ContainerCopyIn sandbox aisb-s1 /", "ContainerCopyIn sandbox aisb-s1 /project", "ContainerAttach sandbox aisb-s1"}
	if got := withoutInspects(f.Log()); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("calls:\n%q\nwant first\n%q", got, want)
	}
}
