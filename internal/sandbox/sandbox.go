// Package sandbox creates and runs the agent's rootless container: the
// project at /project, the entrypoint first, an explicit environment, and a
// network the entrypoint's table reduces to the gate.
package sandbox

import (
	"fmt"
	"io"
	"net"
	"os"

	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/project"
)

// Network helpers and how each shows the host's loopback to the container.
const (
	Pasta       = "pasta"
	Slirp4netns = "slirp4netns"
)

// MappedHost is the address at which the sandbox reaches the host's 127.0.0.1.
func MappedHost(helper string) string {
	if helper == Slirp4netns {
		return "10.0.2.2"
	}
	return "100.64.0.1"
}

// networkFlag is podman's --network value for a mode and helper.
func networkFlag(mode contract.Mode, helper string) string {
	switch {
	case mode == contract.ModeNone:
		return "none"
	case mode == contract.ModeOpen:
		return helper
	case helper == Slirp4netns:
		return "slirp4netns:allow_host_loopback=true"
	default:
		return "pasta:--map-host-loopback," + MappedHost(Pasta)
	}
}

// EntrypointCaps are all the entrypoint needs for its first moments: the
// table (NET_ADMIN), a transparent sandbox's relay ports below 1024
// (NET_BIND_SERVICE), then the drop (SETUID, SETGID, SETPCAP). It gives them
// up before the command runs.
var EntrypointCaps = []string{"NET_ADMIN", "NET_BIND_SERVICE", "SETUID", "SETGID", "SETPCAP"}

// Rlimit is one POSIX resource limit for the rlimit fallback.
type Rlimit struct {
	Type  string // nproc, data or cpu (Podman adds the RLIMIT_ prefix)
	Value uint64
}

// Options describe one sandbox.
type Options struct {
	Session    string
	Image      string
	ProjectDir string
	Command    []string
	Mode       contract.Mode
	Helper     string             // pasta or slirp4netns
	PolicyDir  string             // holds the session policy (contract.PolicyFile) on the host; mounted read-only at contract.PolicyDir
	Files      []File             // handed in through the API before the sandbox starts
	AgentSock  string             // the user's ssh-agent socket, forwarded when set (--ssh-agent)
	GitDirs    []project.GitMount // git directories a worktree's .git file points to
	Env        map[string]string
	HostAdd    []string // "name:address" pins for no-gate mode
	DNS        []net.IP // resolv.conf's servers (network.dns); nil: Podman's default
	Terminal   bool
	Unenforced bool
	CapAdd     []string // nil: EntrypointCaps; doctor narrows it to prove failing closed
	Plain      bool     // run Command as root without the entrypoint: doctor's control only
	PidsLimit  int64    // cgroup limits; zero means none
	Memory     int64
	CPUs       float64
	Rlimits    []Rlimit
	Volumes    []*specgen.NamedVolume // the harness's state volume (statevol)
	Owner      string
	// Finisher is the session's watchdog ("PID:STARTTIME"), which may
	// remove the exited sandbox after its owner exits (engine.LabelFinisher).
	Finisher string
	Overlay  *Overlay // review mode: the project copy-on-write; nil: bind-mounted read-write
	// Remote is an engine that is not local (remote.go): the policy is
	// copied in, not mounted, and the project is ProjectVolume, a volume
	// on the engine's host that Create fills with a copy of ProjectDir.
	// GitDirs, AgentSock and Overlay must be empty.
	Remote        bool
	ProjectVolume string
	// SharedProject is, on an engine that is not local, ProjectDir
	// bind-mounted as on a local one instead of ProjectVolume: the engine
	// was shown to see it at the same path (CheckSharedPath).
	SharedProject bool
	// ProjectCopied is told what the project's copy holds (relative,
	// slash-separated paths), once it is in ProjectVolume; its error
	// stops the sandbox's creation.
	ProjectCopied func(paths []string) error
	// Exited is told once the sandbox's process has exited and Podman's
	// cleanup has taken its network down, before its status is read (nil:
	// nothing).
	Exited func()
	Logf   func(format string, args ...any) // aisb's messages (stderr)
	Trace  func(phase string)               // phase timings ($AISB_TRACE); nil: none
	// StatusReader is aisb's status reader (the program and its
	// subcommand, which calls ReadUpperStatus); nil: the archive copy only.
	StatusReader []string
	Stdin        io.Reader
	Stdout       io.Writer
	Stderr       io.Writer
}

// AgentSockPath is where a forwarded ssh-agent socket appears in the sandbox.
const AgentSockPath = "/run/aisb-ssh-agent.sock"

// minQuota is the kernel's smallest CFS quota, in microseconds.
const minQuota = 1000

// ContainerName is the sandbox container's name.
func ContainerName(session string) string { return "aisb-" + session }

// Spec builds the container spec; exported for tests and doctor.
func Spec(o Options) (*specgen.SpecGenerator, error) {
	s := specgen.NewSpecGenerator(o.Image, false)
	s.Name = ContainerName(o.Session)
	argv := []string{"/usr/local/bin/aisb-entrypoint"}
	if o.Unenforced {
		argv = append(argv, "--allow-unenforced")
	}
	s.Entrypoint = append(argv, "--")
	s.Command = o.Command
	if o.Plain {
		s.Entrypoint, s.Command = o.Command[:1], o.Command[1:]
	}
	// Root of the user namespace for the entrypoint's first moments; it
	// becomes uid 1000 (the host user, through keep-id) before exec.
	s.User = "0:0"
	userns, err := specgen.ParseUserNamespace(userNS)
	if err != nil {
		return nil, err
	}
	s.UserNS = userns
	s.CapDrop = []string{"ALL"}
	s.CapAdd = EntrypointCaps
	if o.CapAdd != nil {
		s.CapAdd = o.CapAdd
	}
	s.NoNewPrivileges = ptr(true)
	ns, nets, netOpts, err := specgen.ParseNetworkFlag([]string{networkFlag(o.Mode, o.Helper)})
	if err != nil {
		return nil, fmt.Errorf("network %s: %w", o.Helper, err)
	}
	s.NetNS, s.Networks, s.NetworkOptions = ns, nets, netOpts
	s.HostAdd = o.HostAdd
	if o.Mode == contract.ModeAllow {
		// Ports below 1024 stay root's in the sandbox's namespace: the
		// relay's (entrypoint/relay) are bound there, and should it die
		// the agent could not take them (the entrypoint checks it).
		s.Sysctl = map[string]string{"net.ipv4.ip_unprivileged_port_start": "1024"}
	}
	// The sandbox needs no resolver (the gate resolves) and its table drops
	// DNS; resolv.conf names network.dns when set, like the gate uses.
	s.DNSServers = o.DNS
	s.Mounts = []spec.Mount{
		{Type: "bind", Source: o.PolicyDir, Destination: contract.PolicyDir, Options: []string{"ro"}},
	}
	if o.Remote {
		if len(o.GitDirs) > 0 || o.AgentSock != "" || o.Overlay != nil || (o.ProjectVolume == "") != o.SharedProject {
			return nil, fmt.Errorf("sandbox on an engine that is not local: no git directories, ssh-agent or overlay can be mounted there, and the project must be a volume or shown shared")
		}
		// Nothing of this host is mounted (remote.go), but the project
		// where the engine was shown to see it at the same path.
		s.Mounts = nil
		if o.SharedProject {
			s.Mounts = []spec.Mount{projectMount(o.ProjectDir)}
			s.Volumes = o.Volumes
		} else {
			s.Volumes = append([]*specgen.NamedVolume{{Name: o.ProjectVolume, Dest: project.ProjectInContainer, Options: []string{"rw"}}}, o.Volumes...)
		}
	} else if o.Overlay != nil {
		s.OverlayVolumes = []*specgen.OverlayVolume{o.Overlay.volume(o.ProjectDir)}
	} else {
		s.Mounts = append([]spec.Mount{projectMount(o.ProjectDir)}, s.Mounts...)
	}
	if !o.Remote {
		s.Volumes = o.Volumes
	}
	s.WorkDir = "/project"
	s.Env = map[string]string{}
	for k, v := range o.Env {
		s.Env[k] = v
	}
	s.Env["HOME"] = contract.AgentHome
	for _, m := range o.GitDirs {
		opts := []string{"rw"}
		if m.ReadOnly {
			opts = []string{"ro"}
		}
		s.Mounts = append(s.Mounts, spec.Mount{Type: "bind", Source: m.Source, Destination: m.Dest, Options: opts})
	}
	if o.AgentSock != "" {
		// A socket cannot be copied in: this is the one bind mount besides
		// the project (and the policy), and only when the user asked for it.
		s.Mounts = append(s.Mounts, spec.Mount{Type: "bind", Source: o.AgentSock, Destination: AgentSockPath, Options: []string{"rw"}})
		s.Env["SSH_AUTH_SOCK"] = AgentSockPath
	}
	s.Terminal = ptr(o.Terminal)
	s.Stdin = ptr(true)
	s.Labels = map[string]string{engine.LabelKind: "sandbox", engine.LabelSession: o.Session, engine.LabelOwner: o.Owner}
	if o.Finisher != "" {
		s.Labels[engine.LabelFinisher] = o.Finisher
	}
	if o.PidsLimit > 0 || o.Memory > 0 || o.CPUs > 0 {
		s.ResourceLimits = &spec.LinuxResources{}
		if o.PidsLimit > 0 {
			s.ResourceLimits.Pids = &spec.LinuxPids{Limit: o.PidsLimit}
		}
		if o.Memory > 0 {
			s.ResourceLimits.Memory = &spec.LinuxMemory{Limit: ptr(o.Memory)}
		}
		if o.CPUs > 0 {
			period := uint64(100000)
			quota := int64(o.CPUs * float64(period))
			if quota < minQuota {
				// A quota of 0 is no limit to the runtime: never let a
				// limit round to nothing (config refuses it first).
				return nil, fmt.Errorf("cpus %g: below the minimum of 0.01 CPU", o.CPUs)
			}
			s.ResourceLimits.CPU = &spec.LinuxCPU{Period: &period, Quota: ptr(quota)}
		}
	}
	for _, r := range o.Rlimits {
		s.Rlimits = append(s.Rlimits, spec.POSIXRlimit{Type: r.Type, Hard: r.Value, Soft: r.Value})
	}
	return s, nil
}

func selinuxEnabled() bool {
	b, err := os.ReadFile("/sys/fs/selinux/enforce")
	return err == nil && len(b) > 0
}

func ptr[T any](v T) *T { return &v }
