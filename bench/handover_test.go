package bench

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// BenchmarkHandOver: the ways to hand a gate's files to a container on
// an engine that is not local, each through Podman's own REST API on
// another user's rootless service (no aisb in the path, so the figures
// are Podman's), interleaved so each sees the same machine:
//
//   - nothing: the container created, started, waited for, removed (the
//     baseline the others' cost is taken over);
//   - archive: the container created, the files copied in as one tar
//     archive (what aisb does), started, waited for, removed;
//   - archive-running: the container started first, waiting for the
//     files' last one, the files copied in (a remote gate's: its probe
//     picks its ports, then waits for squid.conf);
//   - secrets: one Podman secret a file, the container created with them,
//     started, waited for, removed, the secrets removed;
//   - volume: a volume created, the container created with it, the tar
//     copied into the volume through the container (Podman 5.4's service
//     has no volume import), started, waited for, removed, the volume
//     removed: how aisb fills the project's volume.
//
// The container checks that every file is there and whole (its exit code),
// so a way that loses a file fails the benchmark. No goal: it is the
// measurement behind the choice docs/remote.md states.
func BenchmarkHandOver(b *testing.B) {
	api := newRESTClient(b, engineService(b))
	files := gateFiles()
	ways := []struct {
		name string
		run  func(ctx context.Context, id string) error
	}{
		{"nothing", func(ctx context.Context, id string) error { return handNothing(ctx, api, id) }},
		{"archive", func(ctx context.Context, id string) error { return handArchive(ctx, api, id, files) }},
		{"archive-running", func(ctx context.Context, id string) error { return handArchiveRunning(ctx, api, id, files) }},
		{"secrets", func(ctx context.Context, id string) error { return handSecrets(ctx, api, id, files) }},
		{"volume", func(ctx context.Context, id string) error { return handVolume(ctx, api, id, files) }},
	}
	times := map[string][]time.Duration{}
	for i := -1; i < startRuns; i++ { // run -1 warms up
		for _, w := range ways {
			settle(b)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			id := fmt.Sprintf("aisb-bench-handover-%s-%d", w.name, i+1)
			start := time.Now()
			err := w.run(ctx, id)
			took := time.Since(start)
			cancel()
			if err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			if i >= 0 {
				times[w.name] = append(times[w.name], took)
			}
		}
	}
	a, none := median(times["archive"]), median(times["nothing"])
	for _, w := range ways {
		if w.name == "archive" {
			continue
		}
		m := median(times[w.name])
		what := fmt.Sprintf("a gate's %d files (%d bytes) handed to a container on another user's Podman: %s", len(files), filesSize(files), wayText[w.name])
		if w.name != "nothing" {
			what += fmt.Sprintf(", %s over nothing", fmtMs(m-none))
		}
		report(figure{part: partOther, what: what,
			measured: fmtMs(m), baseline: fmt.Sprintf("one archive copy into the created container: %s (%s over nothing)", fmtMs(a), fmtMs(a-none)), ratio: float64(m) / float64(a), goal: noGoal, value: float64(m) / float64(a)})
	}
}

var wayText = map[string]string{
	"nothing":         "none, the container only (create, start, wait, remove)",
	"archive-running": "one archive copy into the started container, which waits for it (a remote gate's files)",
	"secrets":         "a Podman secret a file",
	"volume":          "a volume, filled by an archive copy through the created container (the project's copy)",
}

// handFile is one file handed to the container: its name in /gate and its bytes.
type handFile struct {
	name string
	data []byte
}

// gateFiles stands for a remote gate's files by their sizes as aisb writes
// them (squid.conf, the session CA and its key, the bump port's
// certificate and key, the helper's policy); random bytes, so nothing
// compresses them away.
func gateFiles() []handFile {
	sizes := []struct {
		name string
		size int
	}{{"squid.conf", 4200}, {"ca.pem", 1200}, {"ca.key", 250}, {"tls.pem", 1300}, {"tls.key", 250}, {"policy.json", 600}}
	var fs []handFile
	for _, s := range sizes {
		d := make([]byte, s.size)
		rand.Read(d)
		fs = append(fs, handFile{s.name, d})
	}
	return fs
}

func filesSize(fs []handFile) int {
	n := 0
	for _, f := range fs {
		n += len(f.data)
	}
	return n
}

// checkScript exits 0 only when every file is in dir with its size.
func checkScript(dir string, fs []handFile) string {
	var s strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&s, "[ \"$(wc -c < %s/%s)\" -eq %d ] || exit 3; ", dir, f.name, len(f.data))
	}
	return s.String() + "exit 0"
}

func tarOf(dir string, fs []handFile) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if dir != "" {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755})
	}
	for _, f := range fs {
		name := f.name
		if dir != "" {
			name = dir + "/" + name
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: int64(len(f.data))})
		tw.Write(f.data)
	}
	tw.Close()
	return buf.Bytes()
}

func handNothing(ctx context.Context, api *restClient, id string) error {
	spec := map[string]any{"name": id, "image": testhost.BaseImage, "command": []string{"true"},
		"netns": map[string]string{"nsmode": "none"}}
	if err := api.do(ctx, "POST", "/containers/create", nil, spec); err != nil {
		return err
	}
	defer api.removeContainer(id)
	return api.runContainer(ctx, id)
}

// handArchiveRunning: the container starts first and waits for the files'
// last one, as a remote gate's probe waits for its files.
func handArchiveRunning(ctx context.Context, api *restClient, id string, fs []handFile) error {
	last := handFile{"ready", []byte("1")}
	all := append(slices.Clone(fs), last)
	wait := "while [ ! -e /gate/ready ]; do sleep 0.005; done; "
	spec := map[string]any{"name": id, "image": testhost.BaseImage, "command": []string{"sh", "-c", wait + checkScript("/gate", all)},
		"netns": map[string]string{"nsmode": "none"}}
	if err := api.do(ctx, "POST", "/containers/create", nil, spec); err != nil {
		return err
	}
	defer api.removeContainer(id)
	if err := api.do(ctx, "POST", "/containers/"+id+"/start", nil, nil); err != nil {
		return err
	}
	if err := api.doBody(ctx, "PUT", "/containers/"+id+"/archive", url.Values{"path": {"/"}}, bytes.NewReader(tarOf("gate", fs))); err != nil {
		return err
	}
	if err := api.doBody(ctx, "PUT", "/containers/"+id+"/archive", url.Values{"path": {"/gate"}}, bytes.NewReader(tarOf("", []handFile{last}))); err != nil {
		return err
	}
	return api.waitContainer(ctx, id)
}

func handArchive(ctx context.Context, api *restClient, id string, fs []handFile) error {
	spec := map[string]any{"name": id, "image": testhost.BaseImage, "command": []string{"sh", "-c", checkScript("/gate", fs)},
		"netns": map[string]string{"nsmode": "none"}}
	if err := api.do(ctx, "POST", "/containers/create", nil, spec); err != nil {
		return err
	}
	defer api.removeContainer(id)
	if err := api.doBody(ctx, "PUT", "/containers/"+id+"/archive", url.Values{"path": {"/"}}, bytes.NewReader(tarOf("gate", fs))); err != nil {
		return err
	}
	return api.runContainer(ctx, id)
}

func handSecrets(ctx context.Context, api *restClient, id string, fs []handFile) error {
	var secrets []map[string]any
	for i, f := range fs {
		name := fmt.Sprintf("%s-%d", id, i)
		if err := api.doBody(ctx, "POST", "/secrets/create", url.Values{"name": {name}}, bytes.NewReader(f.data)); err != nil {
			return err
		}
		defer api.do(context.Background(), "DELETE", "/secrets/"+name, nil, nil)
		secrets = append(secrets, map[string]any{"Source": name, "Target": f.name, "Mode": 0o600})
	}
	spec := map[string]any{"name": id, "image": testhost.BaseImage, "command": []string{"sh", "-c", checkScript("/run/secrets", fs)},
		"netns": map[string]string{"nsmode": "none"}, "secrets": secrets}
	if err := api.do(ctx, "POST", "/containers/create", nil, spec); err != nil {
		return err
	}
	defer api.removeContainer(id)
	return api.runContainer(ctx, id)
}

func handVolume(ctx context.Context, api *restClient, id string, fs []handFile) error {
	if err := api.do(ctx, "POST", "/volumes/create", nil, map[string]string{"Name": id}); err != nil {
		return err
	}
	defer api.do(context.Background(), "DELETE", "/volumes/"+id, url.Values{"force": {"true"}}, nil)
	spec := map[string]any{"name": id, "image": testhost.BaseImage, "command": []string{"sh", "-c", checkScript("/gate", fs)},
		"netns": map[string]string{"nsmode": "none"}, "volumes": []map[string]string{{"Name": id, "Dest": "/gate"}}}
	if err := api.do(ctx, "POST", "/containers/create", nil, spec); err != nil {
		return err
	}
	defer api.removeContainer(id)
	// Podman 5.4's service has no volume import (POST
	// /libpod/volumes/NAME/import answers 404): a volume is filled through
	// a container that mounts it.
	if err := api.doBody(ctx, "PUT", "/containers/"+id+"/archive", url.Values{"path": {"/gate"}}, bytes.NewReader(tarOf("", fs))); err != nil {
		return err
	}
	return api.runContainer(ctx, id)
}

// restClient speaks Podman's libpod REST API on a unix socket, for
// measuring Podman's own calls (aisb's go through internal/engine).
type restClient struct {
	http *http.Client
}

func newRESTClient(b *testing.B, uri string) *restClient {
	b.Helper()
	sock, ok := strings.CutPrefix(uri, "unix://")
	if !ok {
		b.Fatalf("not a unix socket: %s", uri)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	return &restClient{http: &http.Client{Transport: tr}}
}

func (c *restClient) do(ctx context.Context, method, path string, q url.Values, body any) error {
	var r io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(j)
	}
	return c.doBody(ctx, method, path, q, r)
}

func (c *restClient) doBody(ctx context.Context, method, path string, q url.Values, body io.Reader) error {
	u := "http://d/v5.0.0/libpod" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %q", method, path, resp.Status, out)
	}
	return nil
}

// runContainer starts id, waits for it and fails unless it exited 0.
func (c *restClient) runContainer(ctx context.Context, id string) error {
	if err := c.do(ctx, "POST", "/containers/"+id+"/start", nil, nil); err != nil {
		return err
	}
	return c.waitContainer(ctx, id)
}

// waitContainer waits for id to exit and fails unless it exited 0.
func (c *restClient) waitContainer(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", "http://d/v5.0.0/libpod/containers/"+id+"/wait", nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("wait %s: %w", id, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if code := strings.TrimSpace(string(out)); resp.StatusCode != 200 || code != "0" {
		return fmt.Errorf("wait %s: %s: exit %q (a file missing or cut short: 3)", id, resp.Status, code)
	}
	return nil
}

func (c *restClient) removeContainer(id string) {
	c.do(context.Background(), "DELETE", "/containers/"+id, url.Values{"force": {"true"}}, nil)
}
