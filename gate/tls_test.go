package gate_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// upstreamCA is the test upstream's own CA; the control proves the running
// upstream is the one that wrote it (tests/host/upstream.sh up).
func upstreamCA(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	path := filepath.Join(testhost.StateDir, "ca.pem")
	b, err := os.ReadFile(path)
	if err != nil {
		testhost.Skip(t, "the test upstream has no CA file (%v); run tests/host/upstream.sh up", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s holds no certificate", path)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", testhost.UpstreamAddr+":443", &tls.Config{ServerName: "allowed.test", RootCAs: pool})
	if err != nil {
		t.Fatalf("control: the test upstream's certificate does not verify against %s without the gate: %v (run tests/host/upstream.sh up)", path, err)
	}
	conn.Close()
	return path, pool
}

// tunnel opens CONNECT target through the gate and returns the connection
// positioned after the gate's 200.
func tunnel(t *testing.T, gateAddr, target string) net.Conn {
	t.Helper()
	code, conn, br := raw(t, gateAddr, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target))
	if code != 200 {
		t.Fatalf("CONNECT %s: %d", target, code)
	}
	return &bufConn{conn, br}
}

// handshake runs a TLS handshake with sni (empty: none sent) inside a tunnel
// to target and, when it succeeds, one GET; it returns the server's
// certificate chain and the reply body.
func handshake(t *testing.T, gateAddr, target, sni string, roots *x509.CertPool) ([]*x509.Certificate, string, error) {
	t.Helper()
	conn := tunnel(t, gateAddr, target)
	defer conn.Close()
	cfg := &tls.Config{ServerName: sni, RootCAs: roots}
	if sni == "" {
		// No SNI: Go sends none when ServerName is empty; the name is
		// checked by hand below instead.
		cfg.InsecureSkipVerify = true
	}
	tc := tls.Client(conn, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, "", err
	}
	host := sni
	if host == "" {
		host = strings.Split(target, ":")[0]
	}
	fmt.Fprintf(tc, "GET /tls-check HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	body, _ := io.ReadAll(tc)
	return tc.ConnectionState().PeerCertificates, string(body), nil
}

// TestTLSPeek: the gate peeks at each tunnel's ClientHello and splices it
// only when it names the host the tunnel was opened for; each refusal has
// a control showing the same attempt reaching the upstream where it should.
// Some 100 lines: the refusals, their controls and the DNS check share one
// gate and one DNS mark.
func TestTLSPeek(t *testing.T) {
	c, img := connect(t)
	_, pool := upstreamCA(t)
	mark := testhost.DNSMark(t)
	g := startGate(t, c, img, "tls-peek", hosts(t, "allowed.test", ".domain.test"))

	// Control and splice: a matching SNI passes, and the client sees the
	// upstream's own certificate, verified against the upstream's CA.
	chain, body, err := handshake(t, g.Addr(), "allowed.test:443", "allowed.test", pool)
	if err != nil {
		t.Fatalf("control: matching SNI: %v", err)
	}
	if !strings.Contains(body, "aisb-upstream https host=allowed.test path=/tls-check") {
		t.Errorf("matching SNI: body %q", body)
	}
	direct, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", testhost.UpstreamAddr+":443", &tls.Config{ServerName: "allowed.test", RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	want := direct.ConnectionState().PeerCertificates[0].Raw
	direct.Close()
	if !bytes.Equal(chain[0].Raw, want) {
		t.Errorf("spliced tunnel: the client saw %q issued by %q, not the upstream's own certificate", chain[0].Subject, chain[0].Issuer)
	}
	// Within an allowed domain, a tunnel to one name may carry another name
	// of the same entry.
	if _, _, err := handshake(t, g.Addr(), "sub.domain.test:443", "sub.domain.test", pool); err != nil {
		t.Errorf("matching SNI under .domain.test: %v", err)
	}

	// Refused: the same handshake naming a host not admitted for the target.
	for _, sni := range []string{"unlisted.test", "other.test", "sub.domain.test"} {
		// Control: the upstream serves that name (the certificate covers
		// it), so a gate that spliced it would have reached it.
		d, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", testhost.UpstreamAddr+":443", &tls.Config{ServerName: sni, RootCAs: pool})
		if err != nil {
			t.Fatalf("control: %s direct: %v", sni, err)
		}
		d.Close()
		if _, body, err := handshake(t, g.Addr(), "allowed.test:443", sni, pool); err == nil {
			t.Errorf("CONNECT allowed.test with SNI %s passed: %q", sni, body)
		}
	}
	// Refused: no SNI at all (squid's own check would fall back to the
	// CONNECT name and splice it).
	if _, body, err := handshake(t, g.Addr(), "allowed.test:443", "", pool); err == nil {
		t.Errorf("a ClientHello without SNI passed: %q", body)
	}
	// Refused: plain bytes in a tunnel to 443. Control: the same bytes sent
	// to the upstream's 443 directly get its answer, so a spliced tunnel
	// would have too.
	payload := "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"
	d, err := net.DialTimeout("tcp", testhost.UpstreamAddr+":443", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(d, payload)
	ctl, _ := io.ReadAll(d)
	d.Close()
	if !strings.Contains(string(ctl), "HTTP/1.0 400") {
		t.Fatalf("control: plain bytes to the upstream's 443: %q", ctl)
	}
	conn := tunnel(t, g.Addr(), "allowed.test:443")
	io.WriteString(conn, payload)
	got, _ := io.ReadAll(bufio.NewReader(conn))
	if bytes.Contains(got, []byte("HTTP/1.0 400")) || bytes.Contains(got, []byte("aisb-upstream")) {
		t.Errorf("plain bytes in a tunnel reached the upstream: %q", got)
	}
	conn.Close()

	// The SNI names refused were never resolved.
	for _, q := range testhost.DNSQueries(t, mark) {
		if q == "unlisted.test" || q == "other.test" {
			t.Errorf("the gate resolved %s, named only in a refused ClientHello", q)
		}
	}

	// The audit: each refusal with its rule and advice, and no terminated
	// tunnel read as allowed.
	g.Stop(c)
	events := readEvents(t, g)
	got2 := map[string]int{}
	for _, e := range events {
		got2[e.Rule]++
		if e.Blocked() == audit.Allowed(e.Rule) {
			t.Errorf("event %+v", e)
		}
		if e.Blocked() && audit.Advice(e) == "" {
			t.Errorf("no advice for %+v", e)
		}
	}
	for rule, n := range map[string]int{audit.RuleAllowed: 2, audit.RuleSNIMismatch: 3, audit.RuleNoSNI: 1, audit.RuleNotTLS: 1} {
		if got2[rule] != n {
			t.Errorf("audit: %d events with rule %s, want %d (all: %v)", got2[rule], rule, n, got2)
		}
	}
	if len(events) != 7 {
		t.Errorf("audit: %d events for 7 tunnels: %+v", len(events), events)
	}
}

// TestTLSListedAddress: a tunnel to a listed address carries no name, so it
// passes without SNI and is refused with one.
func TestTLSListedAddress(t *testing.T) {
	c, img := connect(t)
	_, pool := upstreamCA(t)
	g := startGate(t, c, img, "tls-addr", hosts(t, testhost.UpstreamAddr))
	if _, body, err := handshake(t, g.Addr(), testhost.UpstreamAddr+":443", "", pool); err != nil || !strings.Contains(body, "aisb-upstream https") {
		t.Errorf("listed address without SNI: %v %q", err, body)
	}
	if _, body, err := handshake(t, g.Addr(), testhost.UpstreamAddr+":443", "allowed.test", pool); err == nil {
		t.Errorf("listed address with SNI allowed.test passed: %q", body)
	}
}

// TestCertDBAsSquidMakesIt: the store of generated certificates aisb makes
// for a gate with credentials (WriteTLSFiles) is what squid's own
// `security_file_certgen -c` makes in the gate image, file for file: names,
// kinds, contents. The gate's command no longer runs that tool, so a squid
// whose store changed shape must fail here, not in a session.
func TestCertDBAsSquidMakesIt(t *testing.T) {
	_, img := connect(t)
	dir := testhost.UserDir(t)
	creds := []squidconf.Credential{{Name: "TEST_KEY", Host: hosts(t, "api.allowed.test")[0], Header: "x-api-key", Value: "k"}}
	if _, _, err := gate.WriteTLSFiles(dir, creds, nil); err != nil {
		t.Fatal(err)
	}
	ref := testhost.UserDir(t)
	r := testhost.Podman(t, "run", "--rm", "--network=none", "--userns=keep-id:uid=13,gid=13", "--user", "proxy", "-v", ref+":/ref",
		img, "/usr/lib/squid/security_file_certgen", "-c", "-s", "/ref/db", "-M", "4MB")
	if r.Code != 0 {
		t.Fatalf("security_file_certgen -c: %s", r)
	}
	want, got := tree(t, filepath.Join(ref, "db")), tree(t, filepath.Join(dir, "tls", "certs"))
	if len(want) == 0 {
		t.Fatal("control: squid's tool made an empty store")
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("aisb's store:\n%v\nsquid's:\n%v", got, want)
	}
	// The store holds generated keys: the gate's alone.
	filepath.Walk(filepath.Join(dir, "tls", "certs"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, open to others", p, fi.Mode().Perm())
		}
		return nil
	})
}

// tree lists what is under root: each path with its kind and, for a file,
// its content.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case fi.IsDir():
			out = append(out, rel+"/")
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("%s %q", rel, b))
		default:
			out = append(out, rel+" "+fi.Mode().Type().String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
