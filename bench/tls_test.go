package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// BenchmarkTLSCost: what the TLS layer adds to a request, four gates side by
// side, interleaved so that all see the same machine:
//   - direct: the gate before the TLS layer (the front tunnels to the
//     upstream itself: its cache_peer and never_direct lines removed);
//   - handover: as shipped, but the TLS port splices at once (no peek): the
//     cost of squid handing the tunnel to itself;
//   - peek: as shipped (handover, peek at the ClientHello, splice);
//   - bump: a credential host (the gate decrypts, sets the key, verifies
//     the upstream and encrypts again).
//
// Per gate: a new connection (CONNECT, TLS handshake with the upstream
// inside it, one GET, close), and a second GET on a connection already open.
func BenchmarkTLSCost(b *testing.B) {
	const rounds, warm = 200, 10
	c := connect(b, testhost.Service(b))
	img := gateImage(b, c)
	hosts, _ := allowlist.Parse([]string{"allowed.test", "api.allowed.test"})
	dns := []netip.Addr{netip.MustParseAddr(testhost.UpstreamAddr)}
	caFile := filepath.Join(testhost.StateDir, "ca.pem")
	ca, err := os.ReadFile(caFile)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		b.Fatal("the test upstream's CA does not parse")
	}
	start := func(name string, creds []squidconf.Credential) *gate.Gate {
		g, err := gate.Start(c, gate.Options{Session: name, Dir: testhost.UserDir(b), Image: img, Allowlist: hosts, DNS: dns,
			Credentials: creds, UpstreamCAs: []string{caFile}})
		if err != nil {
			b.Fatal(err)
		}
		asSandbox(g)
		b.Cleanup(func() { g.Stop(c) })
		return g
	}
	direct := start("bench-tls-direct", nil)
	rewrite(b, c, direct, func(l string) string {
		if strings.HasPrefix(l, "cache_peer") || strings.HasPrefix(l, "never_direct") {
			return ""
		}
		return l
	})
	handover := start("bench-tls-handover", nil)
	rewrite(b, c, handover, func(l string) string {
		if strings.HasPrefix(l, "ssl_bump ") {
			if strings.HasPrefix(l, "ssl_bump peek ") {
				return "ssl_bump splice all"
			}
			return ""
		}
		return l
	})
	peek := start("bench-tls-peek", nil)
	key, _ := allowlist.ParseHost("api.allowed.test")
	bump := start("bench-tls-bump", []squidconf.Credential{{Name: "BENCH_KEY", Host: key, Header: "x-api-key", Value: "bench-value"}})
	bumpRoots := roots.Clone()
	if !bumpRoots.AppendCertsFromPEM(bump.CACert()) {
		b.Fatal("the session CA does not parse")
	}

	type target struct {
		name  string
		g     *gate.Gate
		host  string
		roots *x509.CertPool
		fresh []time.Duration // a new connection: CONNECT, handshake, GET
		again []time.Duration // a second GET on the open connection
	}
	targets := []*target{
		{name: "direct", g: direct, host: "allowed.test", roots: roots},
		{name: "handover", g: handover, host: "allowed.test", roots: roots},
		{name: "peek", g: peek, host: "allowed.test", roots: roots},
		{name: "bump", g: bump, host: "api.allowed.test", roots: bumpRoots},
	}
	for i := 0; i < warm+rounds; i++ {
		for _, t := range targets {
			fresh, again, err := twoRequests(t.g.Addr(), t.host, t.roots)
			if err != nil {
				b.Fatalf("%s: %v", t.name, err)
			}
			if i >= warm {
				t.fresh, t.again = append(t.fresh, fresh), append(t.again, again)
			}
		}
	}
	for _, t := range targets {
		b.ReportMetric(ms(median(t.fresh)), t.name+"-new-ms")
		b.ReportMetric(ms(p90(t.fresh)), t.name+"-new-p90-ms")
		b.ReportMetric(ms(median(t.again)), t.name+"-again-ms")
		b.ReportMetric(rssTree(b, c, t.g), t.name+"-rss-MB")
	}
}

// rssTree is the resident memory of the gate's squid and every process
// below it (its helpers), in MB.
func rssTree(b *testing.B, c *engine.Conn, g *gate.Gate) float64 {
	data, err := c.ContainerInspect(context.Background(), g.Name)
	if err != nil {
		b.Fatal(err)
	}
	var kb int
	pids := []int{data.State.Pid}
	for len(pids) > 0 {
		pid := pids[0]
		pids = pids[1:]
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				kb += n
			}
		}
		children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		for _, f := range strings.Fields(string(children)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return float64(kb) / 1024
}

func p90(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*9/10]
}

// rewrite edits a running gate's squid.conf line by line (an empty result
// drops the line), has squid reconfigure, and waits until a tunnel through
// it works again.
func rewrite(b *testing.B, c *engine.Conn, g *gate.Gate, edit func(string) string) {
	b.Helper()
	path := filepath.Join(g.Dir, "squid.conf")
	conf, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(conf), "\n") {
		if l = edit(l); l != "" {
			out = append(out, l)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := gate.Reconfigure(c, g); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, err = twoRequests(g.Addr(), "allowed.test", nil); err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s after reconfiguring: %v", g.Name, err)
		}
	}
}

// twoRequests opens a tunnel to host through the gate, makes two GETs on it
// and returns how long the connection with the first took and how long the
// second took. roots nil: the certificate is not checked.
func twoRequests(gateAddr, host string, roots *x509.CertPool) (fresh, again time.Duration, err error) {
	t0 := time.Now()
	conn, err := net.DialTimeout("tcp", gateAddr, 5*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n%s\r\n", host, host, authHeader(gateAddr))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != 200 {
		return 0, 0, fmt.Errorf("CONNECT %s: %s", host, resp.Status)
	}
	tc := tls.Client(&readConn{conn, br}, &tls.Config{ServerName: host, RootCAs: roots, InsecureSkipVerify: roots == nil})
	tr := bufio.NewReader(tc)
	get := func() error {
		fmt.Fprintf(tc, "GET /bench HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(tr, nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && !strings.Contains(string(body), "aisb-upstream https host="+host) {
			err = errors.New("not the upstream's answer: " + string(body))
		}
		return err
	}
	if err := get(); err != nil {
		return 0, 0, err
	}
	fresh = time.Since(t0)
	t1 := time.Now()
	if err := get(); err != nil {
		return 0, 0, err
	}
	return fresh, time.Since(t1), nil
}

// readConn reads through a bufio.Reader that may hold bytes already read.
type readConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *readConn) Read(p []byte) (int, error) { return c.r.Read(p) }
