package entrypoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/tlsca"
)

func TestTrustSessionCA(t *testing.T) {
	ca, err := tlsca.New([]string{"api.example.test"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "certs", "ca-certificates.crt")
	if err := trustSessionCA(ca.Cert, bundle); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bundle, []byte("-----BEGIN CERTIFICATE-----\nsystem\n-----END CERTIFICATE-----"), 0o644)
	if err := trustSessionCA(ca.Cert, bundle); err != nil {
		t.Fatal(err)
	}
	if err := trustSessionCA(ca.Cert, bundle); err != nil { // twice: appended once
		t.Fatal(err)
	}
	b, _ := os.ReadFile(bundle)
	if !strings.HasPrefix(string(b), "-----BEGIN CERTIFICATE-----\nsystem\n-----END CERTIFICATE-----\n") || strings.Count(string(b), string(ca.Cert)) != 1 {
		t.Errorf("bundle:\n%s", b)
	}
	if fi, _ := os.Stat(bundle); fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode %v", fi.Mode())
	}
	for _, bad := range [][]byte{nil, []byte("junk"), ca.Key, append(append([]byte{}, ca.Cert...), ca.Cert...)} {
		if err := trustSessionCA(bad, bundle); !errors.Is(err, ErrSessionCA) {
			t.Errorf("accepted %.30q: %v", bad, err)
		}
	}
}
