package engine

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/bindings/volumes"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
)

// recorder is a Podman service that answers every request with what
// keeps the bindings going (or a 404) and records its method, path and
// query.
type recorder struct {
	uri  string
	mu   sync.Mutex
	reqs []string
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "podman.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{uri: "unix://" + sock}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Libpod-API-Version", "5.4.2")
		p := req.URL.Path
		if strings.HasSuffix(p, "/_ping") {
			w.Write([]byte("OK"))
			return
		}
		if i := strings.Index(p, "/libpod/"); i >= 0 {
			p = p[i:] // without the API version
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, req.Method+" "+p+"?"+req.URL.Query().Encode())
		r.mu.Unlock()
		switch {
		case strings.HasSuffix(p, "/wait"):
			w.Write([]byte("0"))
		case strings.HasSuffix(p, "/json") || req.Method == http.MethodDelete && strings.HasPrefix(p, "/libpod/containers/"):
			w.Write([]byte("[]"))
		case strings.HasSuffix(p, "/kill") || strings.HasSuffix(p, "/start"):
			w.WriteHeader(http.StatusNoContent)
		case strings.HasSuffix(p, "/archive"):
			w.WriteHeader(http.StatusOK)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"cause":"no such thing","message":"no such thing","response":404}`))
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return r
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

// TestCallsAsBefore: each Engine method of Conn sends the service what the
// bindings call it replaced (with the options aisb gave it) sent.
func TestCallsAsBefore(t *testing.T) {
	r := newRecorder(t)
	c := fakeConn(t, r.uri, t.TempDir())
	ctx := context.Background()
	filters := map[string][]string{"label": {LabelKind + "=gate"}, "volume": {"v"}}
	ready := func() chan bool { return make(chan bool, 1) }
	cases := []struct {
		name     string
		old, new func()
	}{
		{"start", func() { containers.Start(c.Ctx, "x", nil) }, func() { c.ContainerStart(ctx, "x") }},
		{"inspect", func() { containers.Inspect(c.Ctx, "x", nil) }, func() { c.ContainerInspect(ctx, "x") }},
		{"kill", func() { containers.Kill(c.Ctx, "x", new(containers.KillOptions).WithSignal("HUP")) }, func() { c.ContainerKill(ctx, "x", "HUP") }},
		{"remove", func() {
			containers.Remove(c.Ctx, "x", new(containers.RemoveOptions).WithForce(true).WithTimeout(2).WithIgnore(true))
		}, func() { Remove(ctx, c, "x") }},
		{"remove without timeout", func() {
			containers.Remove(c.Ctx, "x", new(containers.RemoveOptions).WithForce(true).WithIgnore(true))
		}, func() { c.ContainerRemove(ctx, "x", RemoveOptions{Force: true, Ignore: true}) }},
		{"wait", func() { containers.Wait(c.Ctx, "x", nil) }, func() { c.ContainerWait(ctx, "x") }},
		{"wait for exited", func() {
			containers.Wait(c.Ctx, "x", new(containers.WaitOptions).WithCondition([]define.ContainerStatus{define.ContainerStateExited, define.ContainerStateStopped}))
		}, func() { c.ContainerWait(ctx, "x", define.ContainerStateExited, define.ContainerStateStopped) }},
		{"list", func() { containers.List(c.Ctx, new(containers.ListOptions).WithAll(true).WithFilters(filters)) }, func() { c.ContainerList(ctx, filters) }},
		{"attach", func() {
			containers.Attach(c.Ctx, "x", strings.NewReader(""), new(bytes.Buffer), new(bytes.Buffer), ready(), new(containers.AttachOptions).WithStream(true).WithDetachKeys(""))
		}, func() {
			c.ContainerAttach(ctx, "x", strings.NewReader(""), new(bytes.Buffer), new(bytes.Buffer), ready(), AttachOptions{NoDetachKeys: true})
		}},
		{"attach with detach keys", func() {
			containers.Attach(c.Ctx, "x", strings.NewReader(""), new(bytes.Buffer), new(bytes.Buffer), ready(), new(containers.AttachOptions).WithStream(true))
		}, func() {
			c.ContainerAttach(ctx, "x", strings.NewReader(""), new(bytes.Buffer), new(bytes.Buffer), ready(), AttachOptions{})
		}},
		{"copy in chown", func() {
			fn, _ := containers.CopyFromArchiveWithOptions(c.Ctx, "x", "/", bytes.NewReader(nil), new(containers.CopyOptions).WithChown(true))
			fn()
		}, func() { c.ContainerCopyIn(ctx, "x", "/", bytes.NewReader(nil), CopyOptions{Chown: true}) }},
		{"copy in", func() {
			fn, _ := containers.CopyFromArchive(c.Ctx, "x", "/state", bytes.NewReader(nil))
			fn()
		}, func() { c.ContainerCopyIn(ctx, "x", "/state", bytes.NewReader(nil), CopyOptions{}) }},
		{"copy out", func() {
			fn, _ := containers.CopyToArchive(c.Ctx, "x", "/state/.", io.Discard)
			fn()
		}, func() { c.ContainerCopyOut(ctx, "x", "/state/.", io.Discard) }},
		{"volume create", func() {
			volumes.Create(c.Ctx, types.VolumeCreateOptions{Name: "v", Label: map[string]string{"a": "b"}}, nil)
		},
			func() { c.VolumeCreate(ctx, types.VolumeCreateOptions{Name: "v", Label: map[string]string{"a": "b"}}) }},
		{"volume exists", func() { volumes.Exists(c.Ctx, "v", nil) }, func() { c.VolumeExists(ctx, "v") }},
		{"volume inspect", func() { volumes.Inspect(c.Ctx, "v", nil) }, func() { c.VolumeInspect(ctx, "v") }},
		{"volume list", func() { volumes.List(c.Ctx, new(volumes.ListOptions).WithFilters(filters)) }, func() { c.VolumeList(ctx, filters) }},
		{"volume remove", func() { volumes.Remove(c.Ctx, "v", nil) }, func() { c.VolumeRemove(ctx, "v") }},
		{"image exists", func() { images.Exists(c.Ctx, "i", nil) }, func() { c.ImageExists(ctx, "i") }},
		{"image get", func() { images.GetImage(c.Ctx, "i", nil) }, func() { c.ImageGet(ctx, "i") }},
		{"image list", func() { images.List(c.Ctx, new(images.ListOptions).WithFilters(filters)) }, func() { c.ImageList(ctx, filters) }},
		{"image pull", func() { images.Pull(c.Ctx, "i", new(images.PullOptions).WithProgressWriter(io.Discard)) },
			func() { c.ImagePull(ctx, "i", io.Discard) }},
		{"info", func() { system.Info(c.Ctx, nil) }, func() { c.Info(ctx) }},
		{"disk usage", func() { system.DiskUsage(c.Ctx, nil) }, func() { c.DiskUsage(ctx) }},
	}
	for _, tc := range cases {
		r.take()
		tc.old()
		old := r.take()
		tc.new()
		got := r.take()
		if len(old) == 0 || !slices.Equal(old, got) {
			t.Errorf("%s: sent %q, the bindings call it replaced %q", tc.name, got, old)
		}
	}
}

// TestCallContext: a call ends when its own context does, though the
// connection's goes on.
func TestCallContext(t *testing.T) {
	block := make(chan struct{})
	sock := filepath.Join(t.TempDir(), "podman.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Libpod-API-Version", "5.4.2")
		if strings.HasSuffix(req.URL.Path, "/_ping") {
			w.Write([]byte("OK"))
			return
		}
		select {
		case <-block:
		case <-req.Context().Done():
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { close(block); srv.Close() })
	c := fakeConn(t, "unix://"+sock, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.ContainerWait(ctx, "x")
	if err == nil {
		t.Errorf("wait past its context: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the wait outlived its context by %s", d)
	}
	if c.Ctx.Err() != nil {
		t.Error("a call's context ended the connection's")
	}
}
