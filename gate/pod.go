package gate

import (
	"encoding/pem"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/netaddr"
	"github.com/aisb-dev/aisb/internal/tlsca"
)

// The gate as a container of a Kubernetes pod (aisb kube): squid on the
// pod's loopback, its files from a Secret, its writable directory an
// emptyDir, its access log on its stdout.
const (
	PodPort    = 3128             // the front, on the pod's 127.0.0.1
	PodTLSPort = 3129             // the TLS port, on the pod's 127.0.0.1
	PodUID     = proxyUID         // the gate container's uid: the only uid whose traffic leaves the pod
	PodRunDir  = "/run/aisb-gate" // the gate's emptyDir: pid file, TLS files, certificate store, log pipes
	PodFileDir = "/etc/aisb-gate" // the Secret, read-only: squid.conf and the TLS files
	podSession = "pod"            // written into every log line
	podAddr    = "127.0.0.1"      // where the gate listens, in the pod
)

// PodOptions are what the gate of a pod is rendered from.
type PodOptions struct {
	Session     string           // a name for the log lines ([a-z0-9-]); "" for "pod"
	Allowlist   []allowlist.Host // validated
	DNS         []netip.Addr     // resolvers instead of the pod's
	Credentials []squidconf.Credential
	UpstreamCAs []string // PEM files of CAs bumped upstreams may chain to, besides the gate image's store
}

// PodGate is the rendered gate of a pod.
type PodGate struct {
	// Files are the Secret's keys: squid.conf (the tokens, the credentials'
	// values) and the TLS files (the session CA's key).
	Files map[string][]byte
	// CACert is the session CA the agent must trust (credential hosts); nil
	// when the gate bumps nothing.
	CACert []byte
	// ProxyURL is the agent's proxy URL, with the token that proves it to
	// its gate.
	ProxyURL string
	// Command is the gate container's command (PodCommand).
	Command []string
}

// podCommand copies the Secret's TLS files into the emptyDir, makes
// squid's empty certificate store (as WriteTLSFiles does), and turns the
// access and cache logs into pipes: squid, as the gate's uid, cannot open
// the container's stdout by name (the runtime's pipe is not its), so two
// cats that inherited stdout and stderr carry the logs there. The upstream
// bundle is the gate image's own store and the user's network.upstream_ca.
const podCommand = `set -eu
d=` + PodRunDir + ` s=` + PodFileDir + `
umask 077
mkdir -p "$d/tls/certs/certs"
for f in ca.pem ca.key sni-helper.sh; do cat "$s/$f" >"$d/tls/$f"; done
{ cat /etc/ssl/certs/ca-certificates.crt 2>/dev/null || true; cat "$s/upstream.pem"; } >"$d/tls/upstream.pem"
: >"$d/tls/certs/index.txt"
echo 0 >"$d/tls/certs/size"
rm -f "$d/access.log" "$d/cache.log" "$d/squid.pid"
mkfifo "$d/access.log" "$d/cache.log"
cat "$d/access.log" &
cat "$d/cache.log" >&2 &
exec squid -N -f "$s/squid.conf"
`

// Pod renders the gate of a pod: squid.conf for the pod's loopback, a
// fresh session CA and tokens. The host's own addresses are not this
// machine's: the pod's node is not known here, so only the internal
// ranges are refused by address (docs/kubernetes.md).
func Pod(o PodOptions) (*PodGate, error) {
	session := o.Session
	if session == "" {
		session = podSession
	}
	tokens, err := newTokens()
	if err != nil {
		return nil, fmt.Errorf("render the pod's gate: %w", err)
	}
	if err := squidconf.CheckCredentials(o.Credentials); err != nil {
		return nil, fmt.Errorf("render the pod's gate: %w", err)
	}
	ca, err := tlsca.New(squidconf.CredentialHosts(o.Credentials), time.Now())
	if err != nil {
		return nil, fmt.Errorf("render the pod's gate: %w", err)
	}
	extra := []byte{}
	for _, p := range o.UpstreamCAs {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("network.upstream_ca: %w", err)
		}
		if blk, _ := pem.Decode(b); blk == nil || blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("network.upstream_ca: %s: %w", p, ErrUpstreamCA)
		}
		extra = append(append(extra, b...), '\n')
	}
	conf, err := squidconf.Render(squidconf.Config{Session: session, Port: PodPort, TLSPort: PodTLSPort, Dir: PodRunDir,
		Allowlist: o.Allowlist, DNS: o.DNS, Host: netaddr.Host{}, Credentials: o.Credentials, Tokens: tokens})
	if err != nil {
		return nil, err
	}
	g := &PodGate{
		Files:    map[string][]byte{"squid.conf": []byte(conf), "ca.pem": ca.Cert, "ca.key": ca.Key, "sni-helper.sh": []byte(squidconf.SNIHelper), "upstream.pem": extra},
		ProxyURL: fmt.Sprintf("http://%s:%s@%s:%d", squidconf.ProxyUser, tokens.Sandbox, podAddr, PodPort),
		Command:  []string{"/bin/sh", "-c", podCommand},
	}
	if len(o.Credentials) > 0 {
		g.CACert = ca.Cert
	}
	return g, nil
}

// PodGateAddr is the gate's front as the agent reaches it, in the pod.
func PodGateAddr() netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(podAddr), PodPort)
}
