// Command upstream is the test host every aisb integration test aims at: it runs
// inside its own network namespace (see tests/host/upstream.sh) and answers
// HTTP on 80 and 8080, HTTPS on 443 with a self-signed certificate, a banner on
// 22 and UDP echo on 9999, logging every connection so tests can prove what
// reached it and what did not.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	logPath := flag.String("log", "", "file every connection is appended to (required)")
	names := flag.String("names", "", "comma-separated DNS names for the certificate")
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
		logger.Printf("%s %s %s host=%s from=%s", scheme, r.Method, r.URL.Path, r.Host, r.RemoteAddr)
		fmt.Fprintf(w, "aisb-upstream %s host=%s path=%s\n", scheme, r.Host, r.URL.Path)
	})
	cert, err := selfSigned(strings.Split(*names, ","))
	if err != nil {
		logger.Fatalf("certificate: %v", err)
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

func selfSigned(names []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "aisb test upstream"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		DNSNames:     names,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
