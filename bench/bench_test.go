// Package bench measures what the sandbox costs, side by side with the same
// work done without it. Run with `make bench`; figures go to docs/performance.md.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/harness"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/sandbox"
	"github.com/aisb-dev/aisb/internal/testhost"
)

const runs = 7 // figures not said otherwise are a median of this many runs (or a multiple)

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// timeIt runs f and returns how long it took, failing on error.
func timeIt(b *testing.B, f func() error) time.Duration {
	b.Helper()
	start := time.Now()
	if err := f(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// user is one user of aisb (testhost.Aisb, as the tests run it) with the
// offline base image and the test upstream's resolver.
type user struct {
	testhost.Aisb
	b *testing.B // whose directories the invocations' files go in
}

func newUser(b *testing.B) *user {
	b.Helper()
	u := &user{Aisb: testhost.NewAisb(b, testhost.BaseImage), b: b}
	testhost.WriteUserFile(b, filepath.Join(u.Config, "aisb", "config.toml"), "version = 1\n[network]\ndns = [\""+testhost.UpstreamAddr+"\"]\n")
	return u
}

func (u *user) aisb(b *testing.B, serviceURI string, args ...string) error {
	b.Helper()
	_, _, err := u.output(serviceURI, args...)
	return err
}

// output runs aisb as the test user in the project directory, through the
// Podman service at serviceURI, or with none named ("": aisb finds or starts
// one, as for a user without a running service), with AISB_TRACE=1.
func (u *user) output(serviceURI string, args ...string) (stdout, stderr string, err error) {
	return u.outputEnv(serviceURI, nil, args...)
}

// outputEnv is output with more variables in aisb's environment.
func (u *user) outputEnv(serviceURI string, more []string, args ...string) (stdout, stderr string, err error) {
	u.b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := u.Command(u.b, ctx, serviceURI, append([]string{"AISB_TRACE=1"}, more...), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), errb.String(), fmt.Errorf("aisb %v: %v\n%s%s", args, err, out.String(), errb.String())
	}
	return out.String(), errb.String(), nil
}

func podmanCLI(args ...string) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := testhost.UserCommand(ctx, append([]string{"podman"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("podman %v: %v\n%s", args, err, out)
		}
		return nil
	}
}

// connect drives the test user's Podman service through the bindings.
func connect(b *testing.B, uri string) *engine.Conn {
	b.Helper()
	b.Setenv("CONTAINER_HOST", uri) // for the aisb commands the benchmarks run
	c, err := engine.Connect(context.Background(), engine.Where{URI: uri})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// gateImage is the gate's image on c, on the offline base: built there
// first if it is not yet.
func gateImage(b *testing.B, c engine.Engine) string {
	b.Helper()
	img := gateImage(b, c)
	return img
}

// shellImage is the spec of the shell harness's sandbox image.
func shellImage(b *testing.B) image.Spec { return shellImageDigests(b, "") }

// shellImageDigests is shellImage with the entrypoint's digest remembered in
// digests (image.Digest), as a session does.
func shellImageDigests(b *testing.B, digests string) image.Spec {
	shell, _ := harness.Lookup("shell")
	ep, err := image.Digest(testhost.Binary(b, "cmd/aisb-entrypoint"), digests)
	if err != nil {
		b.Fatal(err)
	}
	return sandbox.ImageSpec(testhost.BaseImage, shell, ep)
}

// sandboxImage makes sure the shell harness's image exists and returns it.
func sandboxImage(b *testing.B, uri string) string {
	b.Helper()
	tag, _, err := image.Ensure(connect(b, uri), shellImage(b), image.Build{LockDir: b.TempDir(), Output: image.Output{W: os.Stderr}})
	if err != nil {
		b.Fatal(err)
	}
	return tag
}

// BenchmarkGateMemory: squid's resident memory after 1,000 requests.
func BenchmarkGateMemory(b *testing.B) {
	c := connect(b, testhost.Service(b))
	img, _, err := image.Ensure(c, gate.ImageSpec(testhost.BaseImage), image.Build{LockDir: b.TempDir(), Output: image.Output{W: os.Stderr}})
	if err != nil {
		b.Fatal(err)
	}
	hosts, _ := allowlist.Parse([]string{"allowed.test"})
	g, err := gate.Start(c, gate.Options{Session: "bench-mem", Dir: testhost.UserDir(b), Image: img, Allowlist: hosts,
		DNS: []netip.Addr{netip.MustParseAddr(testhost.UpstreamAddr)}})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Stop(c)
	proxy, _ := url.Parse(g.ProxyURL("127.0.0.1"))
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}, Timeout: 10 * time.Second}
	rss := func() float64 {
		data, err := c.ContainerInspect(context.Background(), g.Name)
		if err != nil {
			b.Fatal(err)
		}
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", data.State.Pid))
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				return float64(kb) / 1024
			}
		}
		return 0
	}
	before := rss()
	for i := 0; i < 1000; i++ {
		target := "http://allowed.test/"
		if i%2 == 1 {
			target = "http://other.test/" // refused: a block costs memory too
		}
		resp, err := client.Get(target)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	after := rss()
	report(figure{part: partOther, what: "the gate's resident memory after 1,000 requests (half refused)", measured: fmt.Sprintf("%.1f MB", after),
		baseline: fmt.Sprintf("at start: %.1f MB", before), goal: atMost(40, "≤ 40 MB"), value: after})
}

// BenchmarkRebuildCheck: deciding that nothing needs building, the
// entrypoint's digest included (remembered after the first time, as in
// sessions).
func BenchmarkRebuildCheck(b *testing.B) {
	uri := testhost.Service(b)
	img := sandboxImage(b, uri)
	c, digests := connect(b, uri), filepath.Join(b.TempDir(), "digests")
	var times []time.Duration
	for i := 0; i < 3*runs; i++ {
		times = append(times, timeIt(b, func() error {
			spec := shellImageDigests(b, digests)
			tag, built, err := image.Ensure(c, spec, image.Build{LockDir: b.TempDir(), Output: image.Output{W: os.Stderr}})
			if err == nil && (built || tag != img) {
				err = fmt.Errorf("rebuilt %s although nothing changed", tag)
			}
			return err
		}))
	}
	report(figure{part: partOther, what: "deciding that no image needs rebuilding", measured: fmt.Sprintf("%.1f ms", ms(median(times))), baseline: "—",
		goal: atMost(100, "≤ 100 ms"), value: ms(median(times))})
}
