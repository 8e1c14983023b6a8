package testhost

import (
	"cmp"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test SSH server (tests/host/upstream.sh): OpenSSH's sshd in a namespace
// of its own, serving git to GitUser with the keys a test authorizes.
const (
	SSHAddr = "198.51.100.22" // git.test and gitother.test; port 22
	SSHDir  = StateDir + "/ssh"
	GitUser = "aisbgit"
	GitHome = "/var/lib/" + GitUser
)

// SSHHostKey is the server's public host key line ("ssh-ed25519 AAAA... comment").
func SSHHostKey(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(SSHDir, "host_ed25519.pub"))
	if err != nil {
		Skip(t, "the test SSH server's host key: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// SSHBanner connects to addr:22 without any sandbox or gate and returns the
// first line the server sends: the control that the server is reachable.
func SSHBanner(t testing.TB, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "22"), 5*time.Second)
	if err != nil {
		t.Fatalf("control: %s:22 is not reachable without the sandbox: %v", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
	if !strings.HasPrefix(line, "SSH-2.0-") {
		t.Fatalf("control: %s:22 answered %q, not an SSH banner", addr, line)
	}
	return line
}

// AuthorizeKey lets the public key line in at the test SSH server as GitUser
// until the test ends. Tests of both test users run side by side and the
// server has one authorized_keys file for GitUser: each test adds its line
// and removes only its own, under an exclusive lock on the file.
func AuthorizeKey(t testing.TB, pub string) {
	t.Helper()
	path := filepath.Join(SSHDir, "authorized_keys", GitUser)
	line := strings.TrimSpace(pub)
	if err := editKeys(path, func(lines []string) []string { return append(lines, line) }); err != nil {
		Skip(t, "authorize a key at the test SSH server: %v", err)
	}
	t.Cleanup(func() {
		editKeys(path, func(lines []string) []string {
			return slices.DeleteFunc(lines, func(l string) bool { return l == line })
		})
	})
}

// editKeys rewrites the authorized_keys file at path with edit's lines,
// holding an exclusive flock on it meanwhile (sshd reads it in place).
func editKeys(path string, edit func([]string) []string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	out := strings.Join(edit(lines), "\n")
	if out != "" {
		out += "\n"
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(out), 0); err != nil {
		return err
	}
	return nil
}

// The remote engine host (tests/host/engine-ssh.sh): sshd and the engine
// user's Podman service in a namespace of their own; AISB_ENG_NS and
// AISB_ENG_ADDR name a second instance (a helper's), as for the script.
var (
	EngineNS      = cmp.Or(os.Getenv("AISB_ENG_NS"), "aisb-eng")
	EngineSSHAddr = cmp.Or(os.Getenv("AISB_ENG_ADDR"), "198.51.100.42")
	EngineSSHDir  = "/run/" + EngineNS + "/ssh"
)

// EngineHostKey is the engine host's public host key line.
func EngineHostKey(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(EngineSSHDir, "host_ed25519.pub"))
	if err != nil {
		Skip(t, "the engine host's host key (tests/host/engine-ssh.sh up): %v", err)
	}
	return strings.TrimSpace(string(b))
}

// AuthorizeEngineKey lets the public key line in at the engine host as
// user until the test ends (as AuthorizeKey, for the engine host's sshd).
func AuthorizeEngineKey(t testing.TB, user, pub string) {
	t.Helper()
	path := filepath.Join(EngineSSHDir, "authorized_keys", user)
	line := strings.TrimSpace(pub)
	if err := editKeys(path, func(lines []string) []string { return append(lines, line) }); err != nil {
		Skip(t, "authorize a key at the engine host: %v", err)
	}
	t.Cleanup(func() {
		editKeys(path, func(lines []string) []string {
			return slices.DeleteFunc(lines, func(l string) bool { return l == line })
		})
	})
}
