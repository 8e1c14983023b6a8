package bench

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/live"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// BenchmarkLiveChange: what changing a running gate's list costs the agent,
// two ways, under the same load. Four clients open a fresh connection for a
// listed name every 5 ms; four TLS tunnels to the upstream stay open, one of
// them streaming server-sent events across the change.
//   - reload: a name is added to squid.conf and squid reconfigures (SIGHUP,
//     what `squid -k reconfigure` sends and what gate.WatchHost does when the
//     host's addresses change);
//   - live: aisb allow through the session's live server (the helper answers;
//     squid is not touched).
//
// Reported per change (medians over the rounds): fresh connections that
// failed, the window in which they failed, the time until the new name is
// admitted, and how many of the open tunnels still work afterwards.
func BenchmarkLiveChange(b *testing.B) {
	c := connect(b, testhost.Service(b))
	img := gateImage(b, c)
	hosts, _ := allowlist.Parse([]string{"allowed.test"})
	dns := []netip.Addr{netip.MustParseAddr(testhost.UpstreamAddr)}

	dir := testhost.UserDir(b)
	helperDir := filepath.Join(dir, "ask")
	if err := live.PrepareHelperDir(helperDir, testhost.Binary(b, "cmd/aisb-gatehelper")); err != nil {
		b.Fatal(err)
	}
	control := filepath.Join(b.TempDir(), "control.sock")
	srv, err := live.Start(live.Options{Session: "bench-change", Start: hosts, HelperSocket: filepath.Join(helperDir, squidconf.HelperSocket), ControlSocket: control})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if out, err := exec.Command("chown", "-R", testhost.User+":", helperDir).CombinedOutput(); err != nil {
		b.Fatalf("chown: %v %s", err, out)
	}
	g, err := gate.Start(c, gate.Options{Session: "bench-change", Dir: testhost.UserDir(b), Image: img, Allowlist: hosts, DNS: dns, HelperDir: helperDir})
	if err != nil {
		b.Fatal(err)
	}
	asSandbox(g)
	defer g.Stop(c)
	ca, err := os.ReadFile(filepath.Join(testhost.StateDir, "ca.pem"))
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		b.Fatal("the test upstream's CA does not parse")
	}

	type outcome struct {
		failed    int
		window    time.Duration // first to last failure
		admitted  time.Duration // change → the new name's first 200
		tunnelsOK int
		streamOK  bool
	}
	round := func(name string, change func() error) outcome {
		var tunnels []*tunnel
		for i := 0; i < 4; i++ {
			t, err := openTunnel(g.Addr(), roots)
			if err != nil {
				b.Fatalf("open a tunnel: %v", err)
			}
			defer t.close()
			if err := t.get("/"); err != nil {
				b.Fatalf("a fresh tunnel: %v", err)
			}
			tunnels = append(tunnels, t)
		}
		stream, err := openTunnel(g.Addr(), roots)
		if err != nil {
			b.Fatal(err)
		}
		defer stream.close()
		streamed := make(chan error, 1)
		go func() { streamed <- stream.sse() }()

		var mu sync.Mutex
		var fails []time.Time
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if status, _ := plainGet(g.Addr(), "allowed.test"); status != 200 {
						mu.Lock()
						fails = append(fails, time.Now())
						mu.Unlock()
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		time.Sleep(700 * time.Millisecond) // the SSE stream is between its first and second event
		t0 := time.Now()
		if err := change(); err != nil {
			b.Fatal(err)
		}
		var admitted time.Duration
		for admitted == 0 && time.Since(t0) < 10*time.Second {
			if status, _ := plainGet(g.Addr(), name); status == 200 {
				admitted = time.Since(t0)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if admitted == 0 {
			b.Fatalf("%s not admitted within 10 s of the change", name)
		}
		time.Sleep(1500 * time.Millisecond)
		close(stop)
		wg.Wait()
		o := outcome{failed: len(fails), admitted: admitted, streamOK: <-streamed == nil}
		if len(fails) > 0 {
			o.window = fails[len(fails)-1].Sub(fails[0])
		}
		for _, t := range tunnels {
			if t.get("/after") == nil {
				o.tunnelsOK++
			}
		}
		return o
	}

	conf := filepath.Join(g.Dir, "squid.conf")
	original, err := os.ReadFile(conf)
	if err != nil {
		b.Fatal(err)
	}
	var reload, liveRounds []outcome
	for i := 0; i < 3; i++ {
		reload = append(reload, round("other.test", func() error {
			edited := strings.Replace(string(original), "acl gate_listed_names dstdomain -n allowed.test", "acl gate_listed_names dstdomain -n allowed.test other.test", 1)
			if edited == string(original) {
				return fmt.Errorf("squid.conf has no listed-names line to extend")
			}
			if err := os.WriteFile(conf, []byte(edited), 0o644); err != nil {
				return err
			}
			return gate.Reconfigure(c, g)
		}))
		// Back to the start list, and quiet, before the next round.
		if err := os.WriteFile(conf, original, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := gate.Reconfigure(c, g); err != nil {
			b.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		liveRounds = append(liveRounds, round("other.test", func() error {
			_, err := live.Change(control, live.OpAllow, "other.test")
			return err
		}))
		if _, err := live.Change(control, live.OpDeny, "other.test"); err != nil {
			b.Fatal(err)
		}
	}
	report := func(kind string, outs []outcome) {
		var failed, window, admitted []time.Duration
		tunnels, streams := 0, 0
		for _, o := range outs {
			failed = append(failed, time.Duration(o.failed))
			window = append(window, o.window)
			admitted = append(admitted, o.admitted)
			tunnels += o.tunnelsOK
			if o.streamOK {
				streams++
			}
			b.Logf("%s: %d fresh connections failed over %v; new name admitted after %v; %d/4 tunnels and stream=%v survived",
				kind, o.failed, o.window.Round(time.Millisecond), o.admitted.Round(time.Millisecond), o.tunnelsOK, o.streamOK)
		}
		b.ReportMetric(float64(median(failed)), kind+"-failed-connections")
		b.ReportMetric(ms(median(window)), kind+"-failure-window-ms")
		b.ReportMetric(ms(median(admitted)), kind+"-admitted-after-ms")
		b.ReportMetric(float64(tunnels)/float64(4*len(outs)), kind+"-tunnels-kept-ratio")
		b.ReportMetric(float64(streams)/float64(len(outs)), kind+"-streams-kept-ratio")
	}
	report("reload", reload)
	report("live", liveRounds)
}

// plainGet sends one plain-HTTP request for host through the gate on a
// fresh connection and returns its status (0: the connection failed).
func plainGet(gateAddr, host string) (int, error) {
	conn, err := net.DialTimeout("tcp", gateAddr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", host, host, authHeader(gateAddr))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// tunnel is a CONNECT tunnel through the gate to allowed.test:443 with TLS
// to the upstream inside, kept open between requests.
type tunnel struct {
	conn *tls.Conn
	r    *bufio.Reader
}

func openTunnel(gateAddr string, roots *x509.CertPool) (*tunnel, error) {
	raw, err := net.DialTimeout("tcp", gateAddr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(raw, "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n%s\r\n", authHeader(gateAddr))
	br := bufio.NewReader(raw)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		raw.Close()
		return nil, fmt.Errorf("CONNECT: %v %v", resp, err)
	}
	if br.Buffered() > 0 {
		raw.Close()
		return nil, fmt.Errorf("CONNECT: bytes after the reply")
	}
	c := tls.Client(raw, &tls.Config{ServerName: "allowed.test", RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err := c.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	raw.SetDeadline(time.Time{})
	return &tunnel{conn: c, r: bufio.NewReader(c)}, nil
}

func (t *tunnel) get(path string) error {
	t.conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer t.conn.SetDeadline(time.Time{})
	fmt.Fprintf(t.conn, "GET %s HTTP/1.1\r\nHost: allowed.test\r\n\r\n", path)
	resp, err := http.ReadResponse(t.r, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// sse reads the upstream's three events (one a second) to the end.
func (t *tunnel) sse() error {
	t.conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(t.conn, "GET /sse HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	resp, err := http.ReadResponse(t.r, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
			if strings.HasPrefix(sc.Text(), "data: last ") {
				break
			}
		}
	}
	if events != 3 {
		return fmt.Errorf("%d of 3 events: %v", events, sc.Err())
	}
	return nil
}

func (t *tunnel) close() { t.conn.Close() }
