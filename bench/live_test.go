package bench

import (
	"net/http"
	"net/netip"
	"net/url"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/live"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// BenchmarkAskLatency: a listed name through a session gate that has the
// live helper (ask mode, a watcher attached) against the same request through
// a gate without it; and what asking costs an unlisted name when the watcher
// answers at once. Each figure is the median of single requests on fresh
// connections.
func BenchmarkAskLatency(b *testing.B) {
	c := connect(b, testhost.Service(b))
	img := gateImage(b, c)
	hosts, _ := allowlist.Parse([]string{"allowed.test"})
	dns := []netip.Addr{netip.MustParseAddr(testhost.UpstreamAddr)}
	plain, err := gate.Start(c, gate.Options{Session: "bench-plain", Dir: testhost.UserDir(b), Image: img, Allowlist: hosts, DNS: dns})
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Stop(c)

	// The live server runs as this process (root); the gate's squid runs as
	// the test user, so the helper's directory and socket are handed to it.
	dir := testhost.UserDir(b)
	helperDir := filepath.Join(dir, "ask")
	if err := live.PrepareHelperDir(helperDir, testhost.Binary(b, "cmd/aisb-gatehelper")); err != nil {
		b.Fatal(err)
	}
	control := filepath.Join(b.TempDir(), "control.sock")
	srv, err := live.Start(live.Options{Session: "bench-live", Start: hosts, Ask: true, AskTimeout: 10 * time.Second,
		HelperSocket: filepath.Join(helperDir, squidconf.HelperSocket), ControlSocket: control})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if out, err := exec.Command("chown", "-R", testhost.User+":", helperDir).CombinedOutput(); err != nil {
		b.Fatalf("chown: %v %s", err, out)
	}
	asking, err := gate.Start(c, gate.Options{Session: "bench-live", Dir: testhost.UserDir(b), Image: img, Allowlist: hosts, DNS: dns, HelperDir: helperDir})
	if err != nil {
		b.Fatal(err)
	}
	defer asking.Stop(c)
	w, err := live.OpenWatch(control)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	go func() { // a watcher that allows every question once, at once
		for {
			m, err := w.Next()
			if err != nil {
				return
			}
			if m.Type == "prompt" {
				w.Answer(m.Prompt, live.AnswerOnce)
			}
		}
	}()

	latency := func(g *gate.Gate, target string, want int) time.Duration {
		proxy, _ := url.Parse(g.ProxyURL("127.0.0.1"))
		client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}, Timeout: 20 * time.Second}
		var times []time.Duration
		for i := 0; i < 15*runs; i++ {
			times = append(times, timeIt(b, func() error {
				resp, err := client.Get(target)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					b.Fatalf("%s through %s: status %d, want %d", target, g.Name, resp.StatusCode, want)
				}
				return nil
			}))
		}
		return median(times)
	}
	// Interleave the two gates' listed-name runs so drift hits both alike.
	var listedPlain, listedLive []time.Duration
	for i := 0; i < 3; i++ {
		listedPlain = append(listedPlain, latency(plain, "http://allowed.test/", 200))
		listedLive = append(listedLive, latency(asking, "http://allowed.test/", 200))
	}
	lp, ll := median(listedPlain), median(listedLive)
	asked := latency(asking, "http://other.test/", 200)
	refused := latency(plain, "http://other.test/", 403)
	b.ReportMetric(ms(lp), "listed-plain-ms")
	b.ReportMetric(ms(ll), "listed-ask-gate-ms")
	b.ReportMetric(float64(ll)/float64(lp), "listed-ask/plain-ratio")
	b.ReportMetric(ms(asked), "asked-answered-at-once-ms")
	b.ReportMetric(ms(refused), "refused-plain-ms")
}
