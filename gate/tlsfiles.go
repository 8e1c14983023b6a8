package gate

import (
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/netaddr"
	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/tlsca"
)

// HostTrustStores are where the host's system CA bundle is looked for, in order.
var HostTrustStores = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",             // openSUSE
	"/etc/ssl/cert.pem",                  // Alpine, macOS
}

// ErrUpstreamCA wraps a network.upstream_ca file that holds no certificate.
var ErrUpstreamCA = errors.New("not a PEM file of CA certificates")

// upstreamBundle is the host's trust store (the first of HostTrustStores
// found) followed by the user's extra CA files. found says whether the
// host's store was there; when not, squid adds its image's own.
func upstreamBundle(extra []string) (bundle []byte, found bool, err error) {
	for _, p := range HostTrustStores {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			bundle, found = append(b, '\n'), true
			break
		}
	}
	for _, p := range extra {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, false, fmt.Errorf("network.upstream_ca: %w", err)
		}
		if blk, _ := pem.Decode(b); blk == nil || blk.Type != "CERTIFICATE" {
			return nil, false, fmt.Errorf("network.upstream_ca: %s: %w", p, ErrUpstreamCA)
		}
		bundle = append(append(bundle, b...), '\n')
	}
	return bundle, found, nil
}

// SecretPaths are what of a gate directory holds secrets: squid.conf (the
// credentials' values) and the TLS directory (the session CA's key, the keys
// squid generated). They go with the session; the access log stays.
func SecretPaths(dir string) []string {
	return []string{filepath.Join(dir, "squid.conf"), filepath.Join(dir, squidconf.TLSDir)}
}

// RemoveSecrets removes SecretPaths(dir); whoever finishes the gate does,
// once its squid is gone (aisb, or the session's watchdog after aisb handed
// the gate over).
func RemoveSecrets(dir string) error {
	var errs []error
	for _, p := range SecretPaths(dir) {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove the gate's secrets: %w", err))
		}
	}
	return errors.Join(errs...)
}

// WriteTLSFiles makes a fresh session CA for the credential hosts and writes
// what squid needs into dir/tls, readable by the gate alone. It returns the
// CA certificate and whether squid must add its own trust store.
func WriteTLSFiles(dir string, creds []squidconf.Credential, upstreamCAs []string) (caCert []byte, defaultCA bool, err error) {
	if err := squidconf.CheckCredentials(creds); err != nil {
		return nil, false, err
	}
	tdir := filepath.Join(dir, squidconf.TLSDir)
	if err := os.RemoveAll(tdir); err != nil {
		return nil, false, fmt.Errorf("session tls: %w", err)
	}
	if err := os.Mkdir(tdir, 0o700); err != nil {
		return nil, false, fmt.Errorf("session tls: %w", err)
	}
	if err := chownToParent(tdir); err != nil {
		return nil, false, fmt.Errorf("session tls: %w", err)
	}
	ca, err := tlsca.New(squidconf.CredentialHosts(creds), time.Now())
	if err != nil {
		return nil, false, err
	}
	files := map[string][]byte{squidconf.CACertFile: ca.Cert, squidconf.CAKeyFile: ca.Key, squidconf.SNIHelperFile: []byte(squidconf.SNIHelper)}
	if len(creds) > 0 {
		bundle, found, err := upstreamBundle(upstreamCAs)
		if err != nil {
			return nil, false, err
		}
		files[squidconf.UpstreamCAFile] = bundle
		defaultCA = !found
	}
	for name, b := range files {
		if err := writePrivate(filepath.Join(dir, name), b); err != nil {
			return nil, false, fmt.Errorf("session tls: %w", err)
		}
	}
	if len(creds) > 0 {
		if err := writeCertDB(filepath.Join(dir, squidconf.CertDBDir)); err != nil {
			return nil, false, fmt.Errorf("session tls: %w", err)
		}
	}
	return ca.Cert, defaultCA, nil
}

// writeCertDB makes squid's empty store of generated certificates, as its
// own `security_file_certgen -c` makes it (TestCertDBAsSquidMakesIt
// compares the two in the gate image): a directory holding an empty
// index.txt, a size file saying 0, and an empty certs directory. Made
// here, before the gate starts, the gate's command is squid alone: a shell
// and the tool used to run first, some 30 ms of the gate's start on a
// 2-core VM. It holds generated keys, so it is the gate's alone.
func writeCertDB(db string) error {
	for _, d := range []string{db, filepath.Join(db, "certs")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
		if err := chownToParent(d); err != nil {
			return err
		}
	}
	if err := writePrivate(filepath.Join(db, "index.txt"), nil); err != nil {
		return err
	}
	return writePrivate(filepath.Join(db, "size"), []byte("0"))
}

// chownToParent gives path its directory's owner when root writes for
// another user's gate (the tests do).
func chownToParent(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Dir(path), &st); err != nil {
		return err
	}
	return os.Lchown(path, int(st.Uid), int(st.Gid))
}

// writePrivate writes a file only its owner can read, never through a link
// (squid can write the gate's directory). The owner is the directory's: when
// root writes for another user's gate (the tests do), the file must still be
// the gate's alone, not root's.
func writePrivate(path string, b []byte) error {
	if err := safefile.Write(path, b, 0o600); err != nil {
		return err
	}
	return chownToParent(path)
}

// writeFiles writes what the gate of o reads as it starts, into its
// directory: squid.conf for its two ports and the TLS files, after removing
// what a gate killed before left there. It returns the session CA's
// certificate.
func writeFiles(o Options, port, tlsPort int, tokens squidconf.Tokens) (caCert []byte, err error) {
	host, err := netaddr.HostAddrs()
	if err != nil {
		return nil, err
	}
	return writeFilesFor(o, host, port, tlsPort, tokens)
}

// writeFilesFor is writeFiles for a host whose addresses are host (an
// engine's that is not local, read there by the probe).
func writeFilesFor(o Options, host netaddr.Host, port, tlsPort int, tokens squidconf.Tokens) (caCert []byte, err error) {
	// A stale pid file (a killed gate) stops the next squid from starting.
	// A remote gate's logs are already being copied here (remote.go).
	for _, f := range []string{"access.log", "cache.log", "squid.pid"} {
		if o.Remote == nil {
			os.Remove(filepath.Join(o.Dir, f))
		}
	}
	caCert, defaultCA, err := WriteTLSFiles(o.Dir, o.Credentials, o.UpstreamCAs)
	if err != nil {
		return nil, err
	}
	conf, err := squidconf.Render(squidConfig(o, host, port, tlsPort, defaultCA, tokens))
	if err != nil {
		return nil, err
	}
	// squid.conf may hold credentials: readable by the gate's user alone
	// (the host user, mapped to proxy inside the gate), and never written
	// through a link (squid can write its directory).
	if err := writePrivate(filepath.Join(o.Dir, "squid.conf"), []byte(conf)); err != nil {
		return nil, err
	}
	return caCert, nil
}
