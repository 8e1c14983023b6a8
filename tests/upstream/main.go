// Command upstream is the test host every aisb integration test aims at: it runs
// inside its own network namespace (see tests/host/upstream.sh) and answers
// HTTP on 80 and 8080, HTTPS on 443 with a certificate of its own test CA
// (written to -ca, for gates that verify upstreams), a banner on 22 and UDP
// echo on 9999, a scripted model for harnesses' agent loops (model.go),
// logging every connection so tests can prove what reached it
// and what did not, and every request's headers (to -headers) so tests
// can prove which credential arrived.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	logPath := flag.String("log", "", "file every connection is appended to (required)")
	names := flag.String("names", "", "comma-separated DNS names for the certificate")
	caPath := flag.String("ca", "", "file the test CA's certificate is written to")
	headersPath := flag.String("headers", "", "file every request's headers are appended to, one JSON line each")
	flag.Parse()
	if *logPath == "" {
		fmt.Fprintln(os.Stderr, "upstream: -log is required")
		os.Exit(2)
	}
	f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "upstream: open log: %v\n", err)
		os.Exit(1)
	}
	logger := log.New(f, "", log.LstdFlags|log.Lmicroseconds)
	var headers io.Writer = io.Discard
	if *headersPath != "" {
		hf, err := os.OpenFile(*headersPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			logger.Fatalf("open headers log: %v", err)
		}
		headers = hf
	}
	var headersMu sync.Mutex

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /bytes/N streams N zero bytes: the throughput benchmark's download.
		if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok {
			size, err := strconv.ParseInt(n, 10, 64)
			if err != nil || size < 0 || size > 8<<30 {
				http.Error(w, "bad size", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Length", n)
			buf := make([]byte, 1<<20)
			for size > 0 {
				chunk := min(size, int64(len(buf)))
				if _, err := w.Write(buf[:chunk]); err != nil {
					return
				}
				size -= chunk
			}
			return
		}
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		b, _ := json.Marshal(map[string]any{"scheme": scheme, "method": r.Method, "host": r.Host, "path": r.URL.Path, "headers": r.Header, "proto": r.Proto})
		headersMu.Lock()
		headers.Write(append(b, '\n'))
		headersMu.Unlock()
		// The scripted model (model.go), for a harness's agent loop: each
		// test points its harness at a base URL of its own (/pi/v1/...).
		if api := r.URL.Path; strings.HasSuffix(api, "/v1/messages") || strings.HasSuffix(api, "/v1/responses") {
			body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			logger.Printf("%s model %s host=%s from=%s", scheme, api, r.Host, r.RemoteAddr)
			if strings.HasSuffix(api, "/v1/messages") {
				messages(w, body)
			} else {
				responses(w, body)
			}
			return
		}
		switch r.URL.Path {
		case "/sse":
			sse(w, r)
			return
		case "/upload":
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			logger.Printf("%s upload %d bytes from=%s", scheme, n, r.RemoteAddr)
			fmt.Fprintf(w, "size=%d sha256=%x\n", n, h.Sum(nil))
			return
		}
		logger.Printf("%s %s %s host=%s from=%s", scheme, r.Method, r.URL.Path, r.Host, r.RemoteAddr)
		fmt.Fprintf(w, "aisb-upstream %s host=%s path=%s\n", scheme, r.Host, r.URL.Path)
	})
	cert, caPEM, err := testCA(strings.Split(*names, ","))
	if err != nil {
		logger.Fatalf("certificate: %v", err)
	}
	if *caPath != "" {
		if err := os.WriteFile(*caPath+".tmp", caPEM, 0o644); err != nil {
			logger.Fatalf("write test CA: %v", err)
		}
		if err := os.Rename(*caPath+".tmp", *caPath); err != nil {
			logger.Fatalf("write test CA: %v", err)
		}
	}
	errs := make(chan error)
	for _, port := range []string{":80", ":8080"} {
		go func() { errs <- (&http.Server{Addr: port, Handler: handler}).ListenAndServe() }()
	}
	go func() {
		srv := &http.Server{Addr: ":443", Handler: handler, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
		errs <- srv.ListenAndServeTLS("", "")
	}()
	go func() { errs <- banner(":22", logger) }()
	go func() { errs <- udpEcho(":9999", logger) }()
	logger.Printf("upstream ready")
	logger.Fatal(<-errs)
}

// banner answers every TCP connection with an SSH-like greeting and closes it.
func banner(addr string, logger *log.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		logger.Printf("banner from=%s", c.RemoteAddr())
		c.Write([]byte("SSH-2.0-aisb-upstream\r\n"))
		c.Close()
	}
}

// udpEcho sends every datagram back, prefixed, so a probe knows UDP got through.
func udpEcho(addr string, logger *log.Logger) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		logger.Printf("udp from=%s", from)
		pc.WriteTo(append([]byte("echo:"), buf[:n]...), from)
	}
}

// sse streams three events a second apart, each flushed as it is written: a
// client that sees the first before the last arrived is not being buffered.
func sse(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	for i, ev := range []string{"first", "second", "last"} {
		if i > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Second):
			}
		}
		fmt.Fprintf(w, "data: %s %d\n\n", ev, time.Now().UnixMilli())
		if fl != nil {
			fl.Flush()
		}
	}
}

// testCA makes a CA of the upstream's own and a server certificate for
// names signed by it; it returns the certificate and the CA in PEM.
func testCA(names []string) (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "aisb test upstream CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano() + 1),
		Subject:      pkix.Name{CommonName: "aisb test upstream"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		DNSNames:     names,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}, caPEM, nil
}
