// Command probe is the static client the benchmarks run inside a sandbox,
// through the gate (the proxy named by HTTPS_PROXY, as any tool there uses
// it) or directly (--net open), to time HTTPS requests to the test upstream.
// It prints one JSON object on stdout; exit 1 on any failed request.
//
//	probe latency  -ca FILE -n N URL  each request on a new connection (a new CONNECT through the gate)
//	probe download -ca FILE -n N URL  N downloads of URL side by side on one connection each
//	probe stream   -ca FILE -n N URL  time to the first event of a server-sent event stream
//	probe enforced -ca FILE -direct ADDR:PORT -hold FILE URL
//	                                  "started" at once, then whether a direct connection to
//	                                  ADDR:PORT got through and what one GET of URL answered;
//	                                  then it waits until FILE exists (so many sessions are up
//	                                  at the same moment) and exits 0
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	ca := fs.String("ca", "", "PEM file of the CA the upstream's certificate is signed by")
	n := fs.Int("n", 1, "how many requests")
	warm := fs.Int("warm", 0, "requests made first and not counted")
	direct := fs.String("direct", "", "enforced: the address a direct connection is tried to")
	hold := fs.String("hold", "", "enforced: the file whose existence ends the wait")
	fs.Parse(os.Args[2:])
	if fs.NArg() != 1 || *ca == "" || *n < 1 || os.Args[1] == "enforced" && (*direct == "" || *hold == "") {
		usage()
	}
	if os.Args[1] == "enforced" {
		// The session's first line, before anything is tried: the
		// benchmark times its start to here.
		fmt.Println("started")
	}
	pool, err := caPool(*ca)
	if err != nil {
		fail(err)
	}
	url := fs.Arg(0)
	var out any
	switch os.Args[1] {
	case "latency":
		out, err = latency(pool, url, *warm, *n)
	case "download":
		out, err = download(pool, url, *n)
	case "stream":
		out, err = stream(pool, url, *warm, *n)
	case "enforced":
		json.NewEncoder(os.Stdout).Encode(enforced(pool, url, *direct))
		if err := waitFor(*hold); err != nil {
			fail(err)
		}
		return
	default:
		usage()
	}
	if err != nil {
		fail(err)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: probe latency|download|stream -ca FILE [-n N] [-warm N] URL | probe enforced -ca FILE -direct ADDR:PORT -hold FILE URL")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "probe: %v\n", err)
	os.Exit(1)
}

func caPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", path)
	}
	return pool, nil
}

// client makes a client that goes through the environment's proxy, like
// any tool in the sandbox, and verifies the upstream against the CA.
// Without keep-alives every request opens its own connection.
func client(pool *x509.CertPool, keepAlive bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		DisableKeepAlives: !keepAlive,
		// HTTP/1.1 both ways, as through the gate's tunnel.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}, Timeout: 10 * time.Minute}
}

func get(c *http.Client, url string) (int64, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return n, err
}

// Latency is each request's time from its start (connect, CONNECT through
// the gate, TLS) to the end of its response, in microseconds, and where it
// went (Phases, by name, each request's share in the same order): the name
// lookup ("dns", the transparent path only: through the proxy the gate
// looks the name up), the TCP connect ("connect": to the gate, or to the
// mapped address, which the table redirects to the relay), the proxy's
// CONNECT answered ("proxy_connect", the proxy path only), the TLS
// handshake with the upstream ("tls": on the transparent path it includes
// the relay's own CONNECT through the gate, which the client's first bytes
// wait for), the request to its response's last byte ("request"), and
// what none of them holds ("other": the transport's own work around them).
type Latency struct {
	Micros []int64            `json:"micros"`
	Phases map[string][]int64 `json:"phases"`
}

func latency(pool *x509.CertPool, url string, warm, n int) (Latency, error) {
	c := client(pool, false)
	out := Latency{Phases: map[string][]int64{}}
	for i := 0; i < warm+n; i++ {
		var at [6]time.Time // dns start, dns done, connect start, connect done, tls start, tls done
		trace := &httptrace.ClientTrace{
			DNSStart:          func(httptrace.DNSStartInfo) { at[0] = time.Now() },
			DNSDone:           func(httptrace.DNSDoneInfo) { at[1] = time.Now() },
			ConnectStart:      func(string, string) { at[2] = time.Now() },
			ConnectDone:       func(string, string, error) { at[3] = time.Now() },
			TLSHandshakeStart: func() { at[4] = time.Now() },
			TLSHandshakeDone:  func(tls.ConnectionState, error) { at[5] = time.Now() },
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return out, err
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return out, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		if err != nil {
			return out, err
		}
		end := time.Now()
		if i < warm {
			continue
		}
		out.Micros = append(out.Micros, end.Sub(start).Microseconds())
		span := func(a, b time.Time) int64 {
			if a.IsZero() || b.IsZero() {
				return 0
			}
			return b.Sub(a).Microseconds()
		}
		out.Phases["dns"] = append(out.Phases["dns"], span(at[0], at[1]))
		out.Phases["connect"] = append(out.Phases["connect"], span(at[2], at[3]))
		out.Phases["proxy_connect"] = append(out.Phases["proxy_connect"], span(at[3], at[4]))
		out.Phases["tls"] = append(out.Phases["tls"], span(at[4], at[5]))
		out.Phases["request"] = append(out.Phases["request"], span(at[5], end))
		// What no phase holds: the transport's own work before the
		// lookup or the connect, and between them.
		var in int64
		for _, k := range []string{"dns", "connect", "proxy_connect", "tls", "request"} {
			in += out.Phases[k][len(out.Phases[k])-1]
		}
		out.Phases["other"] = append(out.Phases["other"], end.Sub(start).Microseconds()-in)
	}
	return out, nil
}

// Download is n downloads side by side: the bytes received and the time from
// the first start to the last end.
type Download struct {
	Bytes  int64   `json:"bytes"`
	Second float64 `json:"seconds"`
}

func download(pool *x509.CertPool, url string, n int) (Download, error) {
	c := client(pool, false)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
		errs  []error
	)
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := get(c, url)
			mu.Lock()
			total += got
			errs = append(errs, err)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return Download{Bytes: total, Second: time.Since(start).Seconds()}, errors.Join(errs...)
}

// Stream is, for each request on a new connection, the time from its start
// to the first event's data line, and from the request's last byte written
// to the response's first byte (what a buffering proxy would delay), in
// microseconds.
type Stream struct {
	FirstEvent []int64 `json:"first_event_micros"`
	FirstByte  []int64 `json:"first_byte_after_request_micros"`
}

func stream(pool *x509.CertPool, url string, warm, n int) (Stream, error) {
	c := client(pool, false)
	var out Stream
	for i := 0; i < warm+n; i++ {
		var wrote, first time.Time
		trace := &httptrace.ClientTrace{
			WroteRequest:         func(httptrace.WroteRequestInfo) { wrote = time.Now() },
			GotFirstResponseByte: func() { first = time.Now() },
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return out, err
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return out, err
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		event := time.Now()
		// The rest of the stream is not waited for: closing ends it.
		resp.Body.Close()
		if err != nil || !strings.HasPrefix(line, "data: ") {
			return out, fmt.Errorf("GET %s: first line %q: %v", url, line, err)
		}
		if i >= warm {
			out.FirstEvent = append(out.FirstEvent, event.Sub(start).Microseconds())
			out.FirstByte = append(out.FirstByte, first.Sub(wrote).Microseconds())
		}
	}
	return out, nil
}

// Enforced is what one session found: whether a direct connection got
// through (it must not, under the sandbox's table) and what a request by
// name answered (through the proxy of the environment, the gate).
type Enforced struct {
	DirectConnected bool   `json:"direct_connected"`
	Direct          string `json:"direct"` // how the direct connection ended
	Proxy           string `json:"proxy"`  // the proxy the request went through; "" for none
	Status          int    `json:"status"`
	Error           string `json:"error,omitempty"`
}

func enforced(pool *x509.CertPool, url, direct string) Enforced {
	var out Enforced
	if conn, err := net.DialTimeout("tcp", direct, 3*time.Second); err == nil {
		out.DirectConnected, out.Direct = true, "connected to "+conn.RemoteAddr().String()
		conn.Close()
	} else {
		out.Direct = err.Error()
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	if p, err := http.ProxyFromEnvironment(req); err == nil && p != nil {
		out.Proxy = p.Host
	}
	c := client(pool, false)
	c.Timeout = time.Minute
	resp, err := c.Do(req)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	out.Status = resp.StatusCode
	return out
}

// waitFor waits until path exists, an hour at most.
func waitFor(path string) error {
	for deadline := time.Now().Add(time.Hour); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%s did not appear within an hour", path)
}
