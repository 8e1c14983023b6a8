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
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/live"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// BenchmarkQuestionRemote: what one question of the gate to aisb costs on
// another user's Podman (through the gate's bridge, an exec through the
// API) against the user's own (the helper's socket, bind-mounted). On each
// engine, a request for the upstream's address through a gate that lists
// it (never asked) against one through a gate that does not, where aisb
// allow admitted it (asked at each request: the helper keeps no answer).
// An address, so that no name is resolved. Medians of single requests on
// fresh connections, the four gates interleaved. No goal (docs/remote.md).
func BenchmarkQuestionRemote(b *testing.B) {
	local := connect(b, testhost.Service(b))
	remote := connect(b, engineService(b))
	up := testhost.UpstreamAddr
	listed, _ := allowlist.Parse([]string{up})
	other, _ := allowlist.Parse([]string{"allowed.test"}) // the asking gates list a name, not the address
	dns := []netip.Addr{netip.MustParseAddr(up)}
	helper := testhost.Binary(b, "cmd/aisb-gatehelper")
	localImg, remoteImg := gateImage(b, local), gateImage(b, remote)
	// A live server that allowed the address, as aisb allow does.
	server := func(name, helperSocket string) *live.Server {
		control := filepath.Join(b.TempDir(), "control.sock")
		srv, err := live.Start(live.Options{Session: name, HelperSocket: helperSocket, ControlSocket: control})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Close)
		if _, err := live.Change(control, live.OpAllow, up); err != nil {
			b.Fatal(err)
		}
		return srv
	}
	start := func(c engine.Engine, o gate.Options) *gate.Gate {
		o.Dir, o.DNS = testhost.UserDir(b), dns
		g, err := gate.Start(c, o)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { g.Stop(c) })
		return g
	}
	// The local gate's squid runs as the test user: the helper's directory
	// and socket are handed to it.
	helperDir := filepath.Join(testhost.UserDir(b), "ask")
	if err := live.PrepareHelperDir(helperDir, helper); err != nil {
		b.Fatal(err)
	}
	server("bench-qlocal", filepath.Join(helperDir, squidconf.HelperSocket))
	if out, err := exec.Command("chown", "-R", testhost.User+":", helperDir).CombinedOutput(); err != nil {
		b.Fatalf("chown: %v %s", err, out)
	}
	remoteSrv := server("bench-qremote", "")
	gates := []struct {
		name   string
		g      *gate.Gate
		times  []time.Duration
		metric string
	}{
		{name: "local listed", g: start(local, gate.Options{Session: "bench-qlocal-listed", Image: localImg, Allowlist: listed}), metric: "local-listed-ms"},
		{name: "local asked", g: start(local, gate.Options{Session: "bench-qlocal", Image: localImg, Allowlist: other, HelperDir: helperDir}), metric: "local-asked-ms"},
		{name: "remote listed", g: start(remote, gate.Options{Session: "bench-qremote-listed", Image: remoteImg, Allowlist: listed, Remote: &gate.Remote{Probe: helper}}), metric: "remote-listed-ms"},
		{name: "remote asked", g: start(remote, gate.Options{Session: "bench-qremote", Image: remoteImg, Allowlist: other,
			Remote: &gate.Remote{Probe: helper, Ask: remoteSrv.Ask, Logf: b.Logf}}), metric: "remote-asked-ms"},
	}
	request := func(g *gate.Gate) time.Duration {
		proxy, _ := url.Parse(g.ProxyURL("127.0.0.1"))
		client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}, Timeout: 20 * time.Second}
		return timeIt(b, func() error {
			resp, err := client.Get("http://" + up + "/")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("through %s: status %d, want 200", g.Name, resp.StatusCode)
			}
			return nil
		})
	}
	for i := range gates { // the first question starts squid's helper
		request(gates[i].g)
	}
	for n := 0; n < 15*runs; n++ {
		for i := range gates {
			gates[i].times = append(gates[i].times, request(gates[i].g))
		}
	}
	m := map[string]time.Duration{}
	for _, g := range gates {
		m[g.name] = median(g.times)
		b.ReportMetric(ms(m[g.name]), g.metric)
	}
	b.ReportMetric(ms(m["local asked"]-m["local listed"]), "local-question-ms")
	b.ReportMetric(ms(m["remote asked"]-m["remote listed"]), "remote-question-ms")
	b.Logf("a question: %v on the user's own Podman, %v on another user's (medians of %d: local %v listed, %v asked; remote %v listed, %v asked)",
		m["local asked"]-m["local listed"], m["remote asked"]-m["remote listed"], 15*runs, m["local listed"], m["local asked"], m["remote listed"], m["remote asked"])
}
