package gate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/engine/enginefake"
)

// TestParseProbe: the probe's line gives two distinct ports and the host's
// addresses; anything else is refused (fail closed).
func TestParseProbe(t *testing.T) {
	p, err := parseProbe([]byte(`{"port":40001,"tls_port":40002,"addrs":["127.0.0.1/8","192.0.2.5/24"]}` + "\n"))
	if err != nil || p.Port != 40001 || p.TLSPort != 40002 || len(p.Addrs) != 2 {
		t.Fatalf("parseProbe: %+v, %v", p, err)
	}
	for _, bad := range []string{
		``, `not json`, `{"port":40001,"tls_port":40001,"addrs":["127.0.0.1/8"]}`,
		`{"port":0,"tls_port":40002,"addrs":["127.0.0.1/8"]}`, `{"port":40001,"tls_port":70000,"addrs":["127.0.0.1/8"]}`,
		`{"port":40001,"tls_port":40002,"addrs":[]}`, `{"port":40001,"tls_port":40002,"addrs":["127.0.0.1/8"],"extra":1}`,
	} {
		if _, err := parseProbe([]byte(bad)); !errors.Is(err, ErrProbe) {
			t.Errorf("parseProbe(%q): %v, want ErrProbe", bad, err)
		}
	}
}

// TestRemoteSpec: a remote gate mounts nothing of this host (its files are
// copied in), and keeps its labels, user and dropped capabilities.
func TestRemoteSpec(t *testing.T) {
	s, err := Spec(Options{Session: "remote-spec", Dir: "/nonexistent", Image: "aisb-gate:x", Owner: "1:2", Remote: &Remote{Probe: "/x"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Mounts) != 0 || len(s.Volumes) != 0 {
		t.Errorf("a remote gate mounts %+v %+v", s.Mounts, s.Volumes)
	}
	if s.User != "proxy" || len(s.CapDrop) != 1 || s.CapDrop[0] != "ALL" || s.Labels["io.aisb.owner"] != "1:2" || s.Labels["io.aisb.kind"] != "gate" {
		t.Errorf("spec %+v", s)
	}
}

// TestCopyGateDir: the gate's files go into /gate in one copy; the logs
// squid streams are never copied in.
func TestCopyGateDir(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"squid.conf": "conf", "tls/ca.pem": "ca", "access.log": "old", "cache.log": "old"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o700)
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600)
	}
	f := enginefake.New()
	s, _ := Spec(Options{Session: "copy-test", Dir: dir, Image: "aisb-gate:x", Remote: &Remote{}})
	if _, err := f.ContainerCreate(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if err := copyGateDir(f, s.Name, dir); err != nil {
		t.Fatal(err)
	}
	c, _ := f.Container(s.Name)
	if string(c.Files["/gate/squid.conf"]) != "conf" || string(c.Files["/gate/tls/ca.pem"]) != "ca" {
		t.Errorf("copied: %q", c.Files)
	}
	for p := range c.Files {
		if strings.HasSuffix(p, ".log") {
			t.Errorf("copied %s", p)
		}
	}
}

// TestProbeLineAsksTheLogs: the probe's line is read from the gate's logs
// asked to their present end, not only from the followed stream's copy
// (which the service writes some 250 ms late): here no copy is ever
// written, and the line is still read, within a few asks.
func TestProbeLineAsksTheLogs(t *testing.T) {
	dir := t.TempDir()
	f := enginefake.New()
	line := `{"port":40001,"tls_port":40002,"addrs":["127.0.0.1/8"]}`
	f.Output(enginefake.Name(ContainerName("probe-test")), nil, []byte(line+"\nsquid's own lines\n"))
	s, _ := Spec(Options{Session: "probe-test", Dir: dir, Image: "aisb-gate:x", Remote: &Remote{}})
	if _, err := f.ContainerCreate(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	g := &Gate{Name: s.Name, Dir: dir, remote: f}
	start := time.Now()
	p, err := g.probeLine(f)
	if err != nil || p.Port != 40001 || p.TLSPort != 40002 {
		t.Fatalf("probeLine: %+v, %v", p, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the line took %v", took)
	}
}
