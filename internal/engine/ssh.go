package engine

// An engine reached as ssh://USER@HOST[:PORT]/PATH (issue #29): aisb dials
// the SSH server itself, checks its host key strictly against known_hosts
// files (never adding one: podman's own ssh transport trusts and records an
// unknown key on first use, which is why aisb does not let it dial), and
// serves the bindings a unix socket of its own, in a directory only this
// user can enter, whose every connection is a direct-streamlocal channel to
// PATH on that host. The bindings then speak to a unix socket as for a local
// engine; the locality decision (local.go) is still made from the ssh:// URI:
// not local.
//
// Over 300 lines because it is one piece: the URI, the host key check, the
// login, the tunnel and its sweep belong together and to nothing else.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// SSHConfig is how aisb reaches an ssh:// engine; the caller reads the
// environment once (SSHFromEnv).
type SSHConfig struct {
	// Identity is the private key file to log in with (CONTAINER_SSHKEY,
	// as podman names it); else the agent's keys, else ~/.ssh/id_ed25519,
	// id_ecdsa and id_rsa, those that exist and have no passphrase.
	Identity string
	// AgentSock is ssh-agent's socket (SSH_AUTH_SOCK), if any.
	AgentSock string
	// KnownHosts are the files the host key must be in
	// (AISB_SSH_KNOWN_HOSTS, colon-separated; else ~/.ssh/known_hosts and
	// /etc/ssh/ssh_known_hosts). A key they do not hold is refused.
	KnownHosts []string
	// Home is the user's home directory, for the default files.
	Home string
}

// SSHFromEnv is SSHConfig from the environment.
func SSHFromEnv(getenv func(string) string) SSHConfig {
	c := SSHConfig{Identity: getenv("CONTAINER_SSHKEY"), AgentSock: getenv("SSH_AUTH_SOCK"), Home: getenv("HOME")}
	if kh := getenv("AISB_SSH_KNOWN_HOSTS"); kh != "" {
		c.KnownHosts = filepath.SplitList(kh)
	} else {
		if c.Home != "" {
			c.KnownHosts = append(c.KnownHosts, filepath.Join(c.Home, ".ssh", "known_hosts"))
		}
		c.KnownHosts = append(c.KnownHosts, "/etc/ssh/ssh_known_hosts")
	}
	return c
}

// ErrSSHHostKey is an ssh:// engine whose host key is not pinned by the
// known_hosts files, or is another key than they pin (match with errors.Is;
// the typed *HostKeyError says which).
var ErrSSHHostKey = errors.New("the ssh host key is not trusted")

// HostKeyError is ErrSSHHostKey with the host, the key it offered and the
// files looked in.
type HostKeyError struct {
	Host        string // host:port as dialed
	KeyType     string
	Fingerprint string // SHA256:…
	Files       []string
	Changed     bool // the files pin another key for this host
}

func (e *HostKeyError) Error() string {
	files := strings.Join(e.Files, ", ")
	if e.Changed {
		return fmt.Sprintf("ssh host key of %s is not the one %s pin: it offered %s %s, which may be another machine or someone in between; "+
			"aisb refuses it: if the host's key really changed, check the new fingerprint with the host's owner and replace its line",
			e.Host, files, e.KeyType, e.Fingerprint)
	}
	host, port, _ := net.SplitHostPort(e.Host)
	return fmt.Sprintf("ssh host key of %s (%s %s) is in none of %s: aisb checks it strictly and never adds one; "+
		"check the fingerprint with the host's owner, then add the host's line to ~/.ssh/known_hosts "+
		"(ssh -p %s %s once, or ssh-keyscan -p %s %s), or name a known_hosts file with AISB_SSH_KNOWN_HOSTS",
		e.Host, e.KeyType, e.Fingerprint, files, port, host, port, host)
}

func (e *HostKeyError) Is(target error) bool { return target == ErrSSHHostKey }

// sshTarget is an ssh:// URI taken apart.
type sshTarget struct {
	user, addr, path string
}

func parseSSH(uri string) (sshTarget, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return sshTarget{}, fmt.Errorf("CONTAINER_HOST %q is not a URI: %w", uri, err)
	}
	t := sshTarget{path: u.Path}
	if u.Hostname() == "" {
		return t, fmt.Errorf("CONTAINER_HOST %q names no host: write ssh://USER@HOST[:PORT]/run/user/UID/podman/podman.sock", uri)
	}
	if _, set := u.User.Password(); set {
		return t, fmt.Errorf("CONTAINER_HOST %q carries a password: aisb logs in with keys only (CONTAINER_SSHKEY or ssh-agent)", uri)
	}
	if t.path == "" || t.path == "/" {
		return t, fmt.Errorf("CONTAINER_HOST %q names no socket path: write ssh://USER@HOST[:PORT]/run/user/UID/podman/podman.sock (podman info --format '{{.Host.RemoteSocket.Path}}' on that host says it)", uri)
	}
	port := u.Port()
	if port == "" {
		port = "22"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return t, fmt.Errorf("CONTAINER_HOST %q: port %q is not a port number", uri, port)
	}
	t.addr = net.JoinHostPort(u.Hostname(), port)
	if u.User != nil {
		t.user = u.User.Username()
	}
	if t.user == "" {
		me, err := user.Current()
		if err != nil {
			return t, fmt.Errorf("CONTAINER_HOST %q names no user and this one is unknown: %w", uri, err)
		}
		t.user = me.Username
	}
	return t, nil
}

// hostKeyCallback checks the server's key against the known_hosts files,
// strictly, and the algorithms to ask for (those the files pin for host, so
// a server with several keys offers the pinned one).
func (s SSHConfig) hostKeyCallback(addr string) (ssh.HostKeyCallback, []string, error) {
	var files []string
	for _, f := range s.KnownHosts {
		if _, err := os.Stat(f); err == nil {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no known_hosts file to check the host key of %s against (looked for %s): "+
			"add the host's line to ~/.ssh/known_hosts (ssh to it once), or name a file with AISB_SSH_KNOWN_HOSTS",
			addr, strings.Join(s.KnownHosts, ", "))
	}
	db, err := knownhosts.NewDB(files...)
	if err != nil {
		return nil, nil, fmt.Errorf("read known_hosts: %w", err)
	}
	check := db.HostKeyCallback()
	cb := func(host string, remote net.Addr, key ssh.PublicKey) error {
		err := check(host, remote, key)
		if err == nil {
			return nil
		}
		he := &HostKeyError{Host: host, KeyType: key.Type(), Fingerprint: ssh.FingerprintSHA256(key), Files: files}
		switch {
		case knownhosts.IsHostUnknown(err):
			return he
		case knownhosts.IsHostKeyChanged(err):
			he.Changed = true
			return he
		}
		return err
	}
	return cb, db.HostKeyAlgorithms(addr), nil
}

// auth is the keys to offer: the named identity, else the agent's, else
// the default files without a passphrase.
func (s SSHConfig) auth() ([]ssh.AuthMethod, func(), error) {
	if s.Identity != "" {
		signer, err := readKey(s.Identity)
		if err != nil {
			return nil, nil, fmt.Errorf("CONTAINER_SSHKEY: %w", err)
		}
		return []ssh.AuthMethod{ssh.PublicKeys(signer)}, func() {}, nil
	}
	if s.AgentSock != "" {
		c, err := net.DialTimeout("unix", s.AgentSock, 5*time.Second)
		if err == nil {
			return []ssh.AuthMethod{ssh.PublicKeysCallback(agent.NewClient(c).Signers)}, func() { c.Close() }, nil
		}
	}
	var signers []ssh.Signer
	if s.Home != "" {
		for _, name := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			if signer, err := readKey(filepath.Join(s.Home, ".ssh", name)); err == nil {
				signers = append(signers, signer)
			}
		}
	}
	if len(signers) == 0 {
		return nil, nil, errors.New("no key to log in with: name one with CONTAINER_SSHKEY, or run ssh-agent (SSH_AUTH_SOCK) with it loaded")
	}
	return []ssh.AuthMethod{ssh.PublicKeys(signers...)}, func() {}, nil
}

func readKey(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(b)
	var pp *ssh.PassphraseMissingError
	if errors.As(err, &pp) {
		return nil, fmt.Errorf("%s has a passphrase: load it into ssh-agent instead", path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return signer, nil
}

// sshTunnel is the SSH connection and the local socket the bindings use.
type sshTunnel struct {
	client *ssh.Client
	ln     net.Listener
	dir    string
	sock   string
	once   sync.Once
	wg     sync.WaitGroup
}

// dialSSH logs in to the engine's host and serves sock for the bindings;
// dir is where the socket's private directory goes.
func dialSSH(ctx context.Context, uri string, cfg SSHConfig, dir string) (*sshTunnel, error) {
	t, err := parseSSH(uri)
	if err != nil {
		return nil, err
	}
	hostKey, algos, err := cfg.hostKeyCallback(t.addr)
	if err != nil {
		return nil, err
	}
	methods, done, err := cfg.auth()
	if err != nil {
		return nil, err
	}
	defer done()
	conn, err := (&net.Dialer{Timeout: 20 * time.Second}).DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, fmt.Errorf("ssh to %s: %w", t.addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	cc, chans, reqs, err := ssh.NewClientConn(conn, t.addr, &ssh.ClientConfig{
		User: t.user, Auth: methods, HostKeyCallback: hostKey, HostKeyAlgorithms: algos,
	})
	if err != nil {
		conn.Close()
		var he *HostKeyError
		if errors.As(err, &he) {
			return nil, he
		}
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, fmt.Errorf("ssh to %s as %s: %w (name the key with CONTAINER_SSHKEY or load it into ssh-agent)", t.addr, t.user, err)
		}
		return nil, fmt.Errorf("ssh to %s: %w", t.addr, err)
	}
	conn.SetDeadline(time.Time{})
	client := ssh.NewClient(cc, chans, reqs)
	// The service must answer through the tunnel before aisb serves it.
	probe, err := client.Dial("unix", t.path)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("ssh to %s: reach %s there: %w (is the user's podman service running? systemctl --user enable --now podman.socket)", t.addr, t.path, err)
	}
	probe.Close()
	// The runtime directory, else (none, as on macOS, where /run/user is
	// not) the temporary one; the socket's own directory is 0700 in either.
	if dir == "" || os.MkdirAll(dir, 0o700) != nil {
		dir = os.TempDir()
	}
	sweepTunnels(dir)
	private, err := os.MkdirTemp(dir, "ssh-")
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("ssh tunnel: %w", err)
	}
	tun := &sshTunnel{client: client, dir: private, sock: filepath.Join(private, "podman.sock")}
	tun.ln, err = net.Listen("unix", tun.sock)
	if err != nil {
		client.Close()
		os.RemoveAll(private)
		return nil, fmt.Errorf("ssh tunnel: %w", err)
	}
	tun.wg.Add(2)
	go tun.serve(t.path)
	go tun.keepalive()
	return tun, nil
}

func (t *sshTunnel) serve(path string) {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			r, err := t.client.Dial("unix", path)
			if err != nil {
				c.Close()
				return
			}
			relay(c, r)
		}()
	}
}

// keepalive asks the server every 30 s, so an idle session's connection
// outlives NAT and firewall timeouts; a server that stops answering ends it.
func (t *sshTunnel) keepalive() {
	defer t.wg.Done()
	done := make(chan struct{})
	go func() { t.client.Wait(); close(done) }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if _, _, err := t.client.SendRequest("keepalive@openssh.com", true, nil); err != nil {
				t.client.Close()
				return
			}
		}
	}
}

// relay copies both ways, passing on each side's end of writing.
func relay(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// sweepTunnels removes what killed aisb processes left of their tunnels in
// dir: a socket nothing answers on, or a directory that has had none for a
// minute (one being made has its socket within microseconds).
func sweepTunnels(dir string) {
	old, _ := filepath.Glob(filepath.Join(dir, "ssh-*"))
	for _, d := range old {
		sock := filepath.Join(d, "podman.sock")
		if _, err := os.Lstat(sock); err == nil {
			if !listening(sock) {
				os.RemoveAll(d)
			}
			continue
		}
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() && time.Since(fi.ModTime()) > time.Minute {
			os.RemoveAll(d)
		}
	}
}

// Close ends the SSH connection and removes the socket.
func (t *sshTunnel) Close() {
	t.once.Do(func() {
		t.ln.Close()
		t.client.Close()
		t.wg.Wait()
		os.RemoveAll(t.dir)
	})
}
