package bench

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
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
	if err := api.create(ctx, id, "true", nil); err != nil {
		return err
	}
	defer api.removeContainer(id)
	return api.runContainer(ctx, id)
}

// handArchiveRunning: the container starts first and waits for the files'
// last one, as a remote gate's probe waits for its files.
func handArchiveRunning(ctx context.Context, api *restClient, id string, fs []handFile) error {
	all := append(slices.Clone(fs), handFile{"ready", []byte("1")})
	wait := "while [ ! -e /gate/ready ]; do sleep 0.005; done; "
	if err := api.create(ctx, id, wait+checkScript("/gate", all), nil); err != nil {
		return err
	}
	defer api.removeContainer(id)
	if err := api.do(ctx, "POST", "/containers/"+id+"/start", nil, nil); err != nil {
		return err
	}
	// One copy, its last entry the word, as aisb copies a gate's files.
	if err := api.copyIn(ctx, id, "/", tarOf("gate", all)); err != nil {
		return err
	}
	return api.waitContainer(ctx, id)
}

func handArchive(ctx context.Context, api *restClient, id string, fs []handFile) error {
	if err := api.create(ctx, id, checkScript("/gate", fs), nil); err != nil {
		return err
	}
	defer api.removeContainer(id)
	if err := api.copyIn(ctx, id, "/", tarOf("gate", fs)); err != nil {
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
	if err := api.create(ctx, id, checkScript("/run/secrets", fs), map[string]any{"secrets": secrets}); err != nil {
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
	if err := api.create(ctx, id, checkScript("/gate", fs), map[string]any{"volumes": []map[string]string{{"Name": id, "Dest": "/gate"}}}); err != nil {
		return err
	}
	defer api.removeContainer(id)
	// Podman 5.4's service has no volume import (POST
	// /libpod/volumes/NAME/import answers 404): a volume is filled through
	// a container that mounts it.
	if err := api.copyIn(ctx, id, "/gate", tarOf("", fs)); err != nil {
		return err
	}
	return api.runContainer(ctx, id)
}
