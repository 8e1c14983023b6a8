package session

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aisb-dev/aisb/contract"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/knownhosts"
	"github.com/aisb-dev/aisb/internal/sandbox"
)

// KnownHostsPath is where the sandbox's ssh finds the pinned host keys
// (GlobalKnownHostsFile in the image's ssh config).
const KnownHostsPath = "/etc/ssh/ssh_known_hosts"

// ErrAgent is wrapped when --ssh-agent cannot forward an agent.
var ErrAgent = errors.New("cannot forward the ssh-agent")

// sshParts are what a session hands the sandbox for SSH.
type sshParts struct {
	files     []sandbox.File // the pinned host keys
	agentSock string         // the user's agent, when --ssh-agent
}

// sshSetup is the session's SSH: the pinned host keys, the agent socket when
// asked for, and a word where SSH would not do what the user expects.
func sshSetup(o Options) (sshParts, error) {
	var p sshParts
	hosts := o.Config.SSHHosts
	mode := o.Config.Config.Network.Mode
	switch {
	case len(hosts) == 0:
	case mode == contract.ModeNone || mode == contract.ModeNoGate:
		o.Logf("ssh: network.ssh_hosts and --allow-ssh take effect through the gate only; network mode %s gives SSH no way out", mode)
	case o.GateName != "":
		o.Logf("ssh: the long-lived gate %s decides which hosts SSH reaches (aisb gate up --allow-ssh); this session's list only pins their host keys", o.GateName)
	}
	var err error
	if p.files, err = sshFiles(hosts, o.Logf); err != nil {
		return p, err
	}
	if o.Config.Config.Sandbox.SSHAgent {
		if p.agentSock, err = agentSocket(os.Getenv("SSH_AUTH_SOCK")); err != nil {
			return p, err
		}
	} else if len(hosts) > 0 {
		o.Logf("ssh: your ssh-agent is not forwarded, so ssh in the sandbox has no key; add --ssh-agent to let it ask your agent for signatures")
	}
	return p, nil
}

// sshFiles pins the host keys of the SSH-listed hosts: the lines of the
// user's own known_hosts (read, never written) that name them, handed to the
// sandbox through the API. A listed host with no line is said: ssh inside
// will refuse it, as ssh on the host refuses an unknown host with
// StrictHostKeyChecking.
func sshFiles(hosts []allowlist.Host, logf func(string, ...any)) ([]sandbox.File, error) {
	if len(hosts) == 0 {
		return nil, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("find ~/.ssh/known_hosts: %w", err)
	}
	path := filepath.Join(home, ".ssh", "known_hosts")
	var res knownhosts.Result
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		res.Missing = hosts
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", path, err)
	default:
		res, err = knownhosts.Filter(f, hosts)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	for _, h := range res.Missing {
		logf("ssh: no host key for %s in %s: ssh in the sandbox will refuse it; connect once from this host (ssh -T %s) to record it", h, path, strings.TrimPrefix(h.String(), "."))
	}
	return []sandbox.File{{Path: KnownHostsPath, Mode: 0o644, Content: res.Bytes()}}, nil
}

// agentSocket checks the user's running ssh-agent (SSH_AUTH_SOCK), for --ssh-agent.
func agentSocket(sock string) (string, error) {
	if sock == "" {
		return "", fmt.Errorf("--ssh-agent: %w: SSH_AUTH_SOCK is not set; start ssh-agent and ssh-add your key first", ErrAgent)
	}
	if !filepath.IsAbs(sock) {
		return "", fmt.Errorf("--ssh-agent: %w: SSH_AUTH_SOCK=%q is not an absolute path", ErrAgent, sock)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		return "", fmt.Errorf("--ssh-agent: %w: %v", ErrAgent, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return "", fmt.Errorf("--ssh-agent: %w: SSH_AUTH_SOCK=%q is not a socket", ErrAgent, sock)
	}
	return sock, nil
}
