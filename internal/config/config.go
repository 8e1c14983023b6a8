// Package config reads aisb's TOML configuration strictly and merges the user's
// file, the project's file and flags into one effective configuration.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/termsafe"
)

// Version is the only configuration format version this aisb reads.
const Version = 1

// ExitConfig is the exit status for an invalid configuration (EX_CONFIG).
const ExitConfig = 78

// Config is one configuration file, or the merge of several.
type Config struct {
	Version int     `toml:"version"`
	Network Network `toml:"network"`
	Env     Env     `toml:"env"`
	Limits  Limits  `toml:"limits"`
	Sandbox Sandbox `toml:"sandbox"`
	Logs    Logs    `toml:"logs"`
	// Credentials come from the user's own file and flags only.
	Credentials []Credential `toml:"credentials"`
}

// Logs bound what a session's gate leaves on disk.
type Logs struct {
	SessionMax string `toml:"session_max"` // one audit file, e.g. "64m"
	TotalMax   string `toml:"total_max"`   // all audit files together
}

// Bytes are the two bounds in bytes (each was checked by checkLogs).
func (l Logs) Bytes() (session, total int64) {
	session, _ = ParseMemory(l.SessionMax)
	total, _ = ParseMemory(l.TotalMax)
	return session, total
}

// Network says what the sandbox may reach.
type Network struct {
	Mode contract.Mode `toml:"mode"`
	// AllowedHosts is the file's list as written; validation parses it once
	// into File.Hosts, and from there on only typed hosts travel
	// (Resolved.Allowlist). It is empty in a resolved configuration.
	AllowedHosts []string `toml:"allowed_hosts"`
	SSHHosts     []string `toml:"ssh_hosts"` // as written; parsed into File.SSH, then Resolved.SSHHosts
	HostPorts    []int    `toml:"host_ports"`
	DNS          []string `toml:"dns"`
	Ask          bool     `toml:"ask"`         // hold an unlisted name while aisb watch is asked
	AskTimeout   int      `toml:"ask_timeout"` // seconds a held request waits; 0: DefaultAskTimeout
	// UpstreamCA are PEM files of CAs that credential hosts' certificates
	// may chain to besides the host's trust store (a TLS-inspecting
	// corporate proxy); the user's own configuration only.
	UpstreamCA []string `toml:"upstream_ca"`
}

// DefaultAskTimeout is network.ask_timeout when unset, in seconds.
const DefaultAskTimeout = 30

// MaxAskTimeout bounds network.ask_timeout, in seconds.
const MaxAskTimeout = 600

// AskWait is how long a held request waits for an answer.
func (n Network) AskWait() time.Duration {
	if n.AskTimeout <= 0 {
		return DefaultAskTimeout * time.Second
	}
	return time.Duration(n.AskTimeout) * time.Second
}

// Resolvers are network.dns as addresses. Every entry was checked by
// checkDNS, so none fails to parse.
func (n Network) Resolvers() []netip.Addr {
	var out []netip.Addr
	for _, s := range n.DNS {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// Env says which environment variables enter the sandbox.
type Env struct {
	Pass []string          `toml:"pass"`
	Set  map[string]string `toml:"set"`
}

// Limits bound the sandbox's resources; zero means no limit.
type Limits struct {
	Pids   int     `toml:"pids"`
	Memory string  `toml:"memory"`
	CPUs   float64 `toml:"cpus"`
}

// Sandbox chooses what runs and on which image.
type Sandbox struct {
	Harness   string     `toml:"harness"`
	BaseImage string     `toml:"base_image"`
	SSHAgent  bool       `toml:"ssh_agent"` // forward the user's ssh-agent; never from a project file
	State     StateScope `toml:"state"`
}

// DefaultBaseImage is the public Debian 13 image the sandbox image is built on
// when neither sandbox.base_image nor AISB_BASE_IMAGE says otherwise.
const DefaultBaseImage = "docker.io/library/debian:trixie-slim"

// Default is the configuration when no file says anything: the gate with an
// empty allowlist (reaches nothing), no environment passed, the pi harness.
func Default() Config {
	return Config{
		Version: Version,
		Network: Network{Mode: contract.ModeAllow},
		Sandbox: Sandbox{Harness: "pi", BaseImage: DefaultBaseImage, State: StateProject},
		Logs:    Logs{SessionMax: "64m", TotalMax: "512m"},
	}
}

// Problem is one thing wrong with a configuration file.
type Problem struct {
	File  string // the file as named to the user
	Field string // the field path, e.g. network.allowed_hosts[2]; may be empty
	Msg   string
}

// String is the problem on one line of printable ASCII: a file name or a
// field from a hostile file cannot drive the terminal it is printed on.
func (p Problem) String() string {
	if p.Field == "" {
		return termsafe.Printable(p.File + ": " + p.Msg)
	}
	return termsafe.Printable(p.File + ": " + p.Field + ": " + p.Msg)
}

// ErrInvalid is wrapped by every *Problems error.
var ErrInvalid = errors.New("invalid configuration")

// Problems is the error for an invalid file: one line per problem.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

func (ps Problems) Unwrap() error { return ErrInvalid }

// File is one parsed and validated configuration file.
type File struct {
	Name    string // as shown in messages
	Content []byte // the exact bytes parsed (hashed by trust)
	Config  Config
	Hosts   []allowlist.Host // network.allowed_hosts, parsed
	SSH     []allowlist.Host // network.ssh_hosts, parsed
	defined map[string]bool  // dotted keys present in the file
}

// Defines reports whether the file sets the dotted key, e.g. "network.mode".
func (f *File) Defines(key string) bool { return f.defined[key] }

// MaxFileSize bounds a configuration file: larger ones are refused unread.
const MaxFileSize = 64 << 10

// ReadFile reads and validates one configuration file of the user's own
// (links followed; a regular file within MaxFileSize). A missing file is
// reported with os.ErrNotExist in the chain.
func ReadFile(path string) (*File, error) {
	b, err := safefile.ReadFollow(path, MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, b)
}

// ReadProjectFile reads and validates a project's file, which the agent can
// write: read once, never through a link, a regular file within
// MaxFileSize, so a FIFO, a device or a huge file is an error, not a hang.
func ReadProjectFile(path string) (*File, error) {
	b, err := safefile.Read(path, MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("read config: %w; make it a plain file or remove it", err)
	}
	return Parse(path, b)
}

// Parse decodes content strictly and validates every field. name is used in
// messages. The error is a Problems listing everything wrong.
func Parse(name string, content []byte) (*File, error) {
	var c Config
	md, err := toml.NewDecoder(bytes.NewReader(content)).Decode(&c)
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return nil, Problems{{File: fmt.Sprintf("%s:%d", name, perr.Position.Line), Msg: perr.Message + "; fix the TOML syntax"}}
		}
		return nil, Problems{{File: name, Msg: strings.TrimPrefix(err.Error(), "toml: ")}}
	}
	f := &File{Name: name, Content: content, Config: c, defined: map[string]bool{}}
	var ps Problems
	for _, k := range md.Keys() {
		f.defined[k.String()] = true
	}
	for _, k := range md.Undecoded() {
		ps = append(ps, unknownKey(name, k))
	}
	ps = append(ps, validate(f)...)
	if len(ps) > 0 {
		return nil, ps
	}
	return f, nil
}

func unknownKey(name string, k toml.Key) Problem {
	parent := ""
	if len(k) > 1 {
		parent = strings.Join(k[:len(k)-1], ".")
	}
	if known, ok := knownKeys()[parent]; ok {
		where := "at the top level"
		if parent != "" {
			where = "in [" + parent + "]"
		}
		return Problem{File: name, Field: k.String(), Msg: fmt.Sprintf("unknown key; the keys %s are %s", where, strings.Join(known, ", "))}
	}
	return Problem{File: name, Field: k.String(), Msg: "unknown key; remove it"}
}
