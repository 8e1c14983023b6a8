// The fake's tests, one per part of it (lifecycle, kills, lookups, failures,
// the lost service, copies, filters, volumes and images): together past
// 300 lines, each short.
package enginefake

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	buildahDefine "github.com/containers/buildah/define"
	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/aisb-dev/aisb/internal/engine"
)

var ctx = context.Background()

func spec(name, kind string) *specgen.SpecGenerator {
	s := specgen.NewSpecGenerator("localhost/img", false)
	s.Name = name
	s.Labels = map[string]string{engine.LabelKind: kind}
	return s
}

func mustCreate(t *testing.T, f *Fake, s *specgen.SpecGenerator) {
	t.Helper()
	if _, err := f.ContainerCreate(ctx, s); err != nil {
		t.Fatal(err)
	}
}

func TestLifecycle(t *testing.T) {
	f := New()
	f.ExitOnStart(Kind("sandbox"), 3)
	f.Output(Name("box"), []byte("out\n"), []byte("err\n"))
	mustCreate(t, f, spec("box", "sandbox"))
	ready := make(chan bool, 1)
	attached := make(chan error, 1)
	var stdout, stderr bytes.Buffer
	go func() {
		attached <- f.ContainerAttach(ctx, "box", nil, &stdout, &stderr, ready, engine.AttachOptions{})
	}()
	<-ready
	select {
	case err := <-attached:
		t.Fatalf("attach ended before the start: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	if err := f.ContainerStart(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if err := <-attached; err != nil {
		t.Fatalf("attach: %v", err)
	}
	if stdout.String() != "out\n" || stderr.String() != "err\n" {
		t.Errorf("attach wrote %q and %q", stdout.String(), stderr.String())
	}
	code, err := f.ContainerWait(ctx, "box", define.ContainerStateExited, define.ContainerStateStopped)
	if err != nil || code != 3 {
		t.Fatalf("wait: %d %v, want 3", code, err)
	}
	data, err := f.ContainerInspect(ctx, "box")
	if err != nil || data.State.Status != StateExited || data.State.ExitCode != 3 || data.State.Running {
		t.Fatalf("inspect: %+v %v", data.State, err)
	}
	if err := engine.Remove(ctx, f, "box"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Container("box"); ok {
		t.Error("removed, still there")
	}
	want := []string{"ContainerCreate sandbox box", "ContainerAttach sandbox box", "ContainerStart sandbox box",
		"ContainerWait sandbox box", "ContainerInspect sandbox box", "ContainerRemove sandbox box"}
	if got := f.Log(); !slices.Equal(got, want) {
		t.Errorf("log:\n%q\nwant\n%q", got, want)
	}
}

func TestRunsUntilKilled(t *testing.T) {
	f := New()
	mustCreate(t, f, spec("gate", "gate"))
	if err := f.ContainerStart(ctx, "gate"); err != nil {
		t.Fatal(err)
	}
	if err := f.ContainerKill(ctx, "gate", "HUP"); err != nil {
		t.Fatal(err)
	}
	if c, _ := f.Container("gate"); c.State != StateRunning {
		t.Fatalf("SIGHUP ended it: %s", c.State)
	}
	waited := make(chan int32, 1)
	go func() { code, _ := f.ContainerWait(ctx, "gate"); waited <- code }()
	if err := f.ContainerKill(ctx, "gate", "KILL"); err != nil {
		t.Fatal(err)
	}
	if code := <-waited; code != 137 {
		t.Errorf("killed: exit %d, want 137", code)
	}
	if err := f.ContainerKill(ctx, "gate", "15"); err == nil {
		t.Error("killing an exited container: no error")
	}
	// Exit from the test, and a remove without force of a running one.
	mustCreate(t, f, spec("other", "gate"))
	f.ContainerStart(ctx, "other")
	if err := f.ContainerRemove(ctx, "other", engine.RemoveOptions{}); err == nil {
		t.Error("removed a running container without force")
	}
	if err := f.Exit("other", 5); err != nil {
		t.Fatal(err)
	}
	if c, _ := f.Container("other"); c.State != StateExited || c.ExitCode != 5 {
		t.Errorf("after Exit: %+v", c)
	}
}

func TestNotFound(t *testing.T) {
	f := New()
	if _, err := f.ContainerInspect(ctx, "nope"); !engine.IsNotFound(err) {
		t.Errorf("inspect of a missing container: %v", err)
	}
	if err := engine.Remove(ctx, f, "nope"); err != nil {
		t.Errorf("engine.Remove of a missing container: %v", err)
	}
	if err := f.ContainerRemove(ctx, "nope", engine.RemoveOptions{Force: true}); !engine.IsNotFound(err) {
		t.Errorf("remove without ignore of a missing container: %v", err)
	}
	if _, err := f.VolumeInspect(ctx, "nope"); !engine.IsNotFound(err) {
		t.Errorf("inspect of a missing volume: %v", err)
	}
	if _, err := f.ImageGet(ctx, "nope"); !engine.IsNotFound(err) {
		t.Errorf("get of a missing image: %v", err)
	}
	mustCreate(t, f, spec("twice", "gate"))
	if _, err := f.ContainerCreate(ctx, spec("twice", "gate")); err == nil {
		t.Error("two containers of one name")
	}
}

func TestFailures(t *testing.T) {
	f := New()
	boom := errors.New("boom")
	f.Fail(ContainerStart, Kind("gate"), boom)
	f.FailTimes(ContainerCreate, Name("flaky"), boom, 1)
	mustCreate(t, f, spec("g", "gate"))
	mustCreate(t, f, spec("s", "sandbox"))
	if err := f.ContainerStart(ctx, "g"); !errors.Is(err, boom) {
		t.Errorf("gate start: %v, want boom", err)
	}
	if err := f.ContainerStart(ctx, "s"); err != nil {
		t.Errorf("sandbox start: %v", err)
	}
	if _, err := f.ContainerCreate(ctx, spec("flaky", "sandbox")); !errors.Is(err, boom) {
		t.Errorf("first create of flaky: %v, want boom", err)
	}
	if _, err := f.ContainerCreate(ctx, spec("flaky", "sandbox")); err != nil {
		t.Errorf("second create of flaky: %v", err)
	}
	calls := f.Calls()
	if c := calls[2]; c.Method != ContainerStart || c.Name != "g" || !errors.Is(c.Err, boom) {
		t.Errorf("the failed start is recorded as %+v", c)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := f.ContainerStart(cancelled, "s"); !errors.Is(err, context.Canceled) {
		t.Errorf("start with a cancelled context: %v", err)
	}
}

func TestServiceLost(t *testing.T) {
	f := New()
	mustCreate(t, f, spec("s", "sandbox"))
	f.ContainerStart(ctx, "s")
	f.LoseServiceAfter(1)
	waited := make(chan error, 1)
	go func() { _, err := f.ContainerWait(ctx, "s"); waited <- err }() // the one call let through
	for len(f.Calls()) < 3 {
		time.Sleep(time.Millisecond)
	}
	if !f.Alive() {
		t.Fatal("lost before the call")
	}
	if _, err := f.ContainerInspect(ctx, "s"); !errors.Is(err, ErrServiceLost) {
		t.Errorf("inspect after the loss: %v", err)
	}
	if err := <-waited; !errors.Is(err, ErrServiceLost) {
		t.Errorf("a wait in progress: %v", err)
	}
	if f.Alive() {
		t.Error("alive after the loss")
	}
	if _, err := f.VolumeList(ctx, nil); !errors.Is(err, ErrServiceLost) {
		t.Errorf("volume list after the loss: %v", err)
	}
}

func tarFiles(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(tr)
		out[h.Name] = string(c)
	}
}

func TestCopy(t *testing.T) {
	f := New()
	f.Files(Kind("sandbox"), map[string][]byte{"/run/aisb/status": []byte("exit=0\n")})
	mustCreate(t, f, spec("s", "sandbox"))
	var buf bytes.Buffer
	if err := f.ContainerCopyOut(ctx, "s", "/run/aisb/status", &buf); err != nil {
		t.Fatal(err)
	}
	if got := tarFiles(t, buf.Bytes()); len(got) != 1 || got["status"] != "exit=0\n" {
		t.Errorf("copy out of the file: %q", got)
	}
	if err := f.ContainerCopyOut(ctx, "s", "/missing", io.Discard); !engine.IsNotFound(err) {
		t.Errorf("copy out of a missing path: %v", err)
	}

	// Into a volume through a container that mounts it, out through another.
	if _, err := f.VolumeCreate(ctx, types.VolumeCreateOptions{Name: "vol"}); err != nil {
		t.Fatal(err)
	}
	io1 := spec("io1", "state-io")
	io1.Volumes = []*specgen.NamedVolume{{Name: "vol", Dest: "/state"}}
	mustCreate(t, f, io1)
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	tw.WriteHeader(&tar.Header{Name: "a/settings.json", Size: 2, Mode: 0o644, Typeflag: tar.TypeReg})
	tw.Write([]byte("{}"))
	tw.Close()
	if err := f.ContainerCopyIn(ctx, "io1", "/state", &in, engine.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if files, _ := f.VolumeFiles("vol"); string(files["/a/settings.json"]) != "{}" {
		t.Errorf("volume after the copy in: %q", files)
	}
	io2 := spec("io2", "state-io")
	io2.Volumes = []*specgen.NamedVolume{{Name: "vol", Dest: "/state"}}
	mustCreate(t, f, io2)
	buf.Reset()
	if err := f.ContainerCopyOut(ctx, "io2", "/state/.", &buf); err != nil {
		t.Fatal(err)
	}
	if got := tarFiles(t, buf.Bytes()); len(got) != 1 || got["a/settings.json"] != "{}" {
		t.Errorf("copy out of the volume: %q", got)
	}
	if err := f.VolumeRemove(ctx, "vol"); err == nil {
		t.Error("removed a volume that containers mount")
	}
	if df, err := f.DiskUsage(ctx); err != nil || len(df.Volumes) != 1 || df.Volumes[0].Size != 2 {
		t.Errorf("disk usage: %+v %v", df, err)
	}
}

func TestListFilters(t *testing.T) {
	f := New()
	a := spec("a", "sandbox")
	a.Labels[engine.LabelOwner] = "1:2"
	a.Volumes = []*specgen.NamedVolume{{Name: "vol", Dest: "/state"}}
	mustCreate(t, f, a)
	mustCreate(t, f, spec("b", "gate"))
	names := func(filters map[string][]string) []string {
		list, err := f.ContainerList(ctx, filters)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range list {
			out = append(out, c.Names[0])
		}
		return out
	}
	for _, c := range []struct {
		filters map[string][]string
		want    []string
	}{
		{nil, []string{"a", "b"}},
		{map[string][]string{"label": {engine.LabelKind + "=gate"}}, []string{"b"}},
		{map[string][]string{"label": {engine.LabelOwner}}, []string{"a"}},
		{map[string][]string{"volume": {"vol"}, "label": {engine.LabelKind + "=sandbox"}}, []string{"a"}},
		{map[string][]string{"volume": {"other"}}, nil},
	} {
		if got := names(c.filters); !slices.Equal(got, c.want) {
			t.Errorf("%v: %q, want %q", c.filters, got, c.want)
		}
	}
	if _, err := f.ContainerList(ctx, map[string][]string{"status": {"running"}}); err == nil {
		t.Error("an unknown filter is not refused")
	}
}

func TestVolumesAndImages(t *testing.T) {
	f := New()
	labels := map[string]string{engine.LabelKind: "state"}
	if _, err := f.VolumeCreate(ctx, types.VolumeCreateOptions{Name: "v", Label: labels}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.VolumeExists(ctx, "v"); !ok {
		t.Error("created volume does not exist")
	}
	if v, err := f.VolumeInspect(ctx, "v"); err != nil || v.Labels[engine.LabelKind] != "state" {
		t.Errorf("inspect: %+v %v", v, err)
	}
	if list, _ := f.VolumeList(ctx, map[string][]string{"label": {engine.LabelKind + "=state"}}); len(list) != 1 || list[0].Name != "v" {
		t.Errorf("list: %+v", list)
	}
	if err := f.VolumeRemove(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.VolumeExists(ctx, "v"); ok {
		t.Error("removed volume exists")
	}

	if _, err := f.ImageBuild(ctx, []string{"/x/Containerfile"}, types.BuildOptions{BuildOptions: buildOptions("localhost/aisb-x:1", "io.aisb.image=localhost/aisb-x:1")}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.ImageExists(ctx, "localhost/aisb-x:1"); !ok {
		t.Error("built image does not exist")
	}
	if list, _ := f.ImageList(ctx, map[string][]string{"label": {"io.aisb.image"}}); len(list) != 1 || list[0].RepoTags[0] != "localhost/aisb-x:1" {
		t.Errorf("image list: %+v", list)
	}
	if _, err := f.ImagePull(ctx, "docker.io/library/debian:13", io.Discard); err != nil {
		t.Fatal(err)
	}
	if img, err := f.ImageGet(ctx, "docker.io/library/debian:13"); err != nil || img.ID == "" {
		t.Errorf("pulled image: %+v %v", img, err)
	}
	info, err := f.Info(ctx)
	if err != nil || info.Host.Pasta.Executable == "" {
		t.Errorf("info: %+v %v", info, err)
	}
}

func TestRunOnce(t *testing.T) {
	f := New()
	f.ExitOnStart(Any, 7)
	code, err := engine.RunOnce(ctx, f, "localhost/img", t.TempDir(), "/gate", []string{"sh", "-c", "true"})
	if err != nil || code != 7 {
		t.Fatalf("RunOnce: %d %v, want 7", code, err)
	}
	if names := f.ContainerNames(); len(names) != 0 {
		t.Errorf("left behind: %q", names)
	}
}

func TestServiceFacts(t *testing.T) {
	f := New()
	if !f.SameUser() && f.UID != 0 {
		t.Error("New's service is not this user's")
	}
	f.UIDKnown = false
	if f.SameUser() {
		t.Error("same user without a known uid")
	}
	f.Version = engine.MinVersion
	if f.RequirePasta() == nil {
		t.Errorf("pasta on Podman %s", f.Version)
	}
}

func buildOptions(output, label string) buildahDefine.BuildOptions {
	return buildahDefine.BuildOptions{Output: output, Labels: []string{label}}
}
