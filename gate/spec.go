package gate

import (
	"fmt"
	"syscall"

	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/netaddr"
)

// userNS is the gate's user namespace: squid runs as Debian's proxy user,
// which is the host user.
var userNS = fmt.Sprintf("keep-id:uid=%d,gid=%d", proxyUID, proxyUID)

// dirInContainer is where the session directory is mounted in the gate.
const dirInContainer = "/gate"

// proxyUID is Debian's proxy user, which the gate runs as.
const proxyUID = 13

// helperMount is where a session gate finds HelperDir (its helper,
// squidconf.HelperProgram, and the socket, squidconf.HelperSocket).
const helperMount = "/ask"

// Spec is the gate container of o: squid alone, on the host's network, as
// Debian's proxy user (the host user), with no capability on a read-only
// root, its directory mounted and, read-only, the helper's. It reads no
// file and asks no service: what it runs is fixed by o alone.
func Spec(o Options) (*specgen.SpecGenerator, error) {
	s := specgen.NewSpecGenerator(o.Image, false)
	s.Name = ContainerName(o.Session)
	// With credentials, squid's certificate store is already there
	// (WriteTLSFiles).
	s.Command = []string{"squid", "-N", "-f", dirInContainer + "/squid.conf"}
	// SIGINT makes squid close its connections and exit at once; SIGTERM
	// waits shutdown_lifetime and often outlasts podman's stop timeout.
	s.StopSignal = ptr(syscall.SIGINT)
	s.NetNS = specgen.Namespace{NSMode: specgen.Host}
	userns, err := specgen.ParseUserNamespace(userNS)
	if err != nil {
		return nil, err
	}
	s.UserNS = userns
	s.User = "proxy"
	s.CapDrop = []string{"ALL"}
	s.NoNewPrivileges = ptr(true)
	s.ReadOnlyFilesystem = ptr(true)
	s.ReadWriteTmpfs = ptr(true)
	switch {
	case o.Remote != nil:
		// On an engine that is not local its directory is copied in
		// (remote.go), and squid writes its pid file and, with
		// credentials, its generated certificates there: its root is
		// writable (by the proxy user only where it owns a directory:
		// /gate). Nothing is mounted.
		s.ReadOnlyFilesystem = ptr(false)
		// Its first step is the probe, which then execs squid (remote.go).
		s.Entrypoint, s.Command = remoteCommand()
	default:
		s.Mounts = []spec.Mount{{Type: "bind", Source: o.Dir, Destination: dirInContainer, Options: []string{"rw"}}}
		if o.HelperDir != "" {
			// Read-only: squid (the user's uid on the host) can connect to the
			// socket but replace neither it nor the helper.
			s.Mounts = append(s.Mounts, spec.Mount{Type: "bind", Source: o.HelperDir, Destination: helperMount, Options: []string{"ro"}})
		}
	}
	s.Labels = map[string]string{engine.LabelKind: "gate", engine.LabelSession: o.Session}
	if o.Owner != "" {
		s.Labels[engine.LabelOwner] = o.Owner
	}
	if o.Finisher != "" {
		s.Labels[engine.LabelFinisher] = o.Finisher
	}
	return s, nil
}

// squidConfig is what the gate of o renders its squid.conf from, as squid
// sees its directory: its two ports, the host's addresses, and whether
// squid adds its own trust store (see WriteTLSFiles).
func squidConfig(o Options, host netaddr.Host, port, tlsPort int, defaultCA bool, tokens squidconf.Tokens) squidconf.Config {
	cfg := squidconf.Config{Session: o.Session, Port: port, TLSPort: tlsPort, Dir: dirInContainer, Allowlist: o.Allowlist, SSHHosts: o.SSHHosts, DNS: o.DNS, Host: host,
		Credentials: o.Credentials, DefaultCA: defaultCA, Tokens: tokens, Stream: o.Remote != nil}
	switch {
	case o.HelperDir != "":
		cfg.Helper = &squidconf.Helper{Program: helperMount + "/" + squidconf.HelperProgram, Socket: helperMount + "/" + squidconf.HelperSocket}
	case o.Remote != nil && o.Remote.Ask != nil:
		// The probe's program is the helper too; the bridge listens on
		// its socket (bridge.go).
		cfg.Helper = &squidconf.Helper{Program: probeProgram, Socket: bridgeSocket}
	}
	return cfg
}

func ptr[T any](v T) *T { return &v }
