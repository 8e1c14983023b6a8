package engine

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseSSH(t *testing.T) {
	for _, tc := range []struct {
		uri, user, addr, path, err string
	}{
		{uri: "ssh://core@box/run/user/1000/podman/podman.sock", user: "core", addr: "box:22", path: "/run/user/1000/podman/podman.sock"},
		{uri: "ssh://core@198.51.100.42:2222/run/podman/podman.sock", user: "core", addr: "198.51.100.42:2222", path: "/run/podman/podman.sock"},
		{uri: "ssh://core@[2001:db8::1]:22/s.sock", user: "core", addr: "[2001:db8::1]:22", path: "/s.sock"},
		{uri: "ssh://core@box", err: "names no socket path"},
		{uri: "ssh://core@box/", err: "names no socket path"},
		{uri: "ssh:///run/podman/podman.sock", err: "names no host"},
		{uri: "ssh://core:secret@box/s.sock", err: "carries a password"},
		{uri: "ssh://core@box:99999/s.sock", err: "is not a port number"},
	} {
		got, err := parseSSH(tc.uri)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseSSH(%q): %v; want an error with %q", tc.uri, err, tc.err)
			}
			continue
		}
		if err != nil || got != (sshTarget{tc.user, tc.addr, tc.path}) {
			t.Errorf("parseSSH(%q) = %+v, %v; want %s %s %s", tc.uri, got, err, tc.user, tc.addr, tc.path)
		}
	}
}

func TestSSHFromEnv(t *testing.T) {
	env := map[string]string{"HOME": "/home/u", "CONTAINER_SSHKEY": "/k", "SSH_AUTH_SOCK": "/a"}
	c := SSHFromEnv(func(k string) string { return env[k] })
	if c.Identity != "/k" || c.AgentSock != "/a" || strings.Join(c.KnownHosts, ",") != "/home/u/.ssh/known_hosts,/etc/ssh/ssh_known_hosts" {
		t.Errorf("SSHFromEnv = %+v", c)
	}
	env["AISB_SSH_KNOWN_HOSTS"] = "/x:/y"
	if c := SSHFromEnv(func(k string) string { return env[k] }); strings.Join(c.KnownHosts, ",") != "/x,/y" {
		t.Errorf("AISB_SSH_KNOWN_HOSTS: %v", c.KnownHosts)
	}
}

// No known_hosts file at all is an error naming the files, not trust.
func TestSSHNoKnownHosts(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "known_hosts")
	_, _, err := SSHConfig{KnownHosts: []string{missing}}.hostKeyCallback("box:22")
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "AISB_SSH_KNOWN_HOSTS") {
		t.Fatalf("no known_hosts: %v", err)
	}
}

func TestHostKeyError(t *testing.T) {
	var err error = fmt.Errorf("connect: %w", &HostKeyError{Host: "box:2222", KeyType: "ssh-ed25519", Fingerprint: "SHA256:x", Files: []string{"/k"}})
	if !errors.Is(err, ErrSSHHostKey) || !strings.Contains(err.Error(), "ssh-keyscan -p 2222 box") || !strings.Contains(err.Error(), "never adds one") {
		t.Errorf("unknown: %v", err)
	}
	var he *HostKeyError
	if !errors.As(err, &he) || he.Changed {
		t.Errorf("As: %+v", he)
	}
	changed := &HostKeyError{Host: "box:22", KeyType: "ssh-ed25519", Fingerprint: "SHA256:x", Files: []string{"/k"}, Changed: true}
	if !errors.Is(changed, ErrSSHHostKey) || !strings.Contains(changed.Error(), "is not the one /k pin") {
		t.Errorf("changed: %v", changed)
	}
}

// A named identity that is missing or has a passphrase says so.
func TestSSHAuthIdentity(t *testing.T) {
	if _, _, err := (SSHConfig{Identity: "/nonexistent/key"}).auth(); err == nil || !strings.Contains(err.Error(), "CONTAINER_SSHKEY") {
		t.Errorf("missing identity: %v", err)
	}
	if _, _, err := (SSHConfig{Home: t.TempDir()}).auth(); err == nil || !strings.Contains(err.Error(), "no key to log in with") {
		t.Errorf("no key at all: %v", err)
	}
}

// A dead tunnel's directory (its aisb was killed) is swept; a live one,
// and a fresh one still without its socket, are not.
func TestSweepTunnels(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, "ssh-dead")
	live := filepath.Join(dir, "ssh-live")
	fresh := filepath.Join(dir, "ssh-fresh")
	stale := filepath.Join(dir, "ssh-stale")
	for _, d := range []string{dead, live, fresh, stale} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("unix", filepath.Join(live, "podman.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l2, err := net.Listen("unix", filepath.Join(dead, "podman.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l2.(*net.UnixListener).SetUnlinkOnClose(false)
	l2.Close()
	long := time.Now().Add(-2 * time.Minute)
	os.Chtimes(stale, long, long)
	sweepTunnels(dir)
	for d, want := range map[string]bool{dead: false, live: true, fresh: true, stale: false} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}
