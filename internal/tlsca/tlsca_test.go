package tlsca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// sign issues a leaf for names and ips with the CA, as squid would.
func sign(t *testing.T, ca *CA, names []string, ips []net.IP) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(pair.Certificate[0])
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "leaf"},
		DNSNames: names, IPAddresses: ips,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, pair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return leaf
}

func verify(ca *CA, leaf *x509.Certificate, name string) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Cert)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name})
	return err
}

// TestNameConstraints: the CA's certificates are accepted for the
// credential hosts and refused, by a verifying client, for any other name or
// any address, even if the CA's key leaked.
func TestNameConstraints(t *testing.T) {
	ca, err := New([]string{"api.example.test", "keys.example.test"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(ca.Cert)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA || !cert.PermittedDNSDomainsCritical || cert.NotAfter.Sub(cert.NotBefore) > Validity+10*time.Minute {
		t.Errorf("CA %+v", cert)
	}
	if _, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("key %T, want ECDSA", cert.PublicKey)
	}
	// Control: a certificate for a credential host verifies.
	if err := verify(ca, sign(t, ca, []string{"api.example.test"}, nil), "api.example.test"); err != nil {
		t.Fatalf("control: %v", err)
	}
	for name, leaf := range map[string]*x509.Certificate{
		"other.test":         sign(t, ca, []string{"other.test"}, nil),
		"example.test":       sign(t, ca, []string{"example.test"}, nil),
		"api.example.test.x": sign(t, ca, []string{"api.example.test.x"}, nil),
		"198.51.100.10":      sign(t, ca, nil, []net.IP{net.ParseIP("198.51.100.10")}),
		"2001:db8::1":        sign(t, ca, nil, []net.IP{net.ParseIP("2001:db8::1")}),
	} {
		if err := verify(ca, leaf, name); err == nil {
			t.Errorf("a certificate for %s verified", name)
		}
	}
	// A certificate naming a credential host and another is refused whole.
	if err := verify(ca, sign(t, ca, []string{"api.example.test", "other.test"}, nil), "api.example.test"); err == nil {
		t.Error("a certificate with an unconstrained extra name verified")
	}
}

// TestNoHosts: without credential hosts the CA signs only a reserved name.
func TestNoHosts(t *testing.T) {
	ca, err := New(nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(ca, sign(t, ca, []string{NoHost}, nil), NoHost); err != nil {
		t.Fatalf("control: %v", err)
	}
	if err := verify(ca, sign(t, ca, []string{"api.example.test"}, nil), "api.example.test"); err == nil {
		t.Error("a CA for no host signed a real name")
	}
}
