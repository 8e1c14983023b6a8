// Package tlsca makes a session's certificate authority for the gate's credential hosts.
package tlsca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Validity is how long a session CA is valid. The CA is removed with its
// session; the bound only limits a copy that outlived it.
const Validity = 7 * 24 * time.Hour

// NoHost is the one name a CA for a session without credential hosts may
// sign: a reserved name that is never a real site.
const NoHost = "aisb-gate.invalid"

// CA is a session CA, both halves in PEM.
type CA struct {
	Cert []byte // what the sandbox trusts
	Key  []byte // PKCS#8; only the gate may read it
}

// New makes an ECDSA P-256 CA valid from shortly before now for Validity
// that may only sign the given host names and their subdomains: X.509 name
// constraints, critical, permit those DNS names and exclude every IP
// address, so a client that checks them (Go, OpenSSL, GnuTLS, NSS) refuses
// anything else it signs. hosts must be validated names; none means NoHost.
func New(hosts []string, now time.Time) (*CA, error) {
	if len(hosts) == 0 {
		hosts = []string{NoHost}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("session ca: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("session ca: serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:                serial.Add(serial, big.NewInt(1)),
		Subject:                     pkix.Name{CommonName: "aisb session CA", Organization: []string{"aisb"}},
		NotBefore:                   now.Add(-5 * time.Minute),
		NotAfter:                    now.Add(Validity),
		IsCA:                        true,
		BasicConstraintsValid:       true,
		MaxPathLenZero:              true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         hosts,
		ExcludedIPRanges: []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("session ca: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("session ca: %w", err)
	}
	return &CA{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}
