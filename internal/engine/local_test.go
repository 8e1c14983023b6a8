package engine

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeProbe is a host whose socket is served by peer, running exe.
func fakeProbe(euid int, peer peerCred, peerErr error, exe string) localProbe {
	return localProbe{
		euid: euid,
		peer: func(string) (peerCred, error) { return peer, peerErr },
		exe:  func(int) (string, error) { return exe, nil },
	}
}

func TestDecideLocal(t *testing.T) {
	for _, tc := range []struct {
		name, uri string
		p         localProbe
		local     bool
		why       string
	}{
		{"own podman", "unix:///run/user/1006/podman/podman.sock", fakeProbe(1006, peerCred{PID: 42, UID: 1006}, nil, "/usr/bin/podman"), true, "served by podman (pid 42)"},
		{"podman upgraded under its service", "unix:///run/user/1006/podman/podman.sock", fakeProbe(1006, peerCred{PID: 42, UID: 1006}, nil, "/usr/bin/podman (deleted)"), true, "served by podman (pid 42)"},
		{"socket activation", "unix:///run/user/1006/podman/podman.sock", fakeProbe(1006, peerCred{PID: 7, UID: 1006}, nil, "/usr/lib/systemd/systemd"), true, "served by systemd"},
		{"another user's podman", "unix:///srv/engine/podman.sock", fakeProbe(1006, peerCred{PID: 42, UID: 1007}, nil, "/usr/bin/podman"), false, "uid 1007, not this process's uid 1006"},
		{"root's podman for a user", "unix:///run/podman/podman.sock", fakeProbe(1006, peerCred{PID: 1, UID: 0}, nil, "/usr/bin/podman"), false, "uid 0"},
		// The spelling of a local socket does not make it local.
		{"another user's, spelled as ours", "unix:///run/user/1006/podman/podman.sock", fakeProbe(1006, peerCred{PID: 42, UID: 1007}, nil, "/usr/bin/podman"), false, "uid 1007"},
		{"other pid namespace", "unix:///tmp/podman.sock", fakeProbe(1006, peerCred{PID: 0, UID: 1006}, nil, "/usr/bin/podman"), false, "another pid namespace"},
		{"ssh -L forward", "unix:///tmp/fwd.sock", fakeProbe(1006, peerCred{PID: 9, UID: 1006}, nil, "/usr/bin/ssh"), false, `"/usr/bin/ssh" (pid 9), not by Podman`},
		{"gvproxy", "unix:///tmp/machine.sock", fakeProbe(1006, peerCred{PID: 9, UID: 1006}, nil, "/usr/libexec/podman/gvproxy"), false, "not by Podman"},
		{"nothing listens", "unix:///tmp/none.sock", fakeProbe(1006, peerCred{}, &unreachableError{errors.New("connection refused")}, ""), false, "nothing answers on /tmp/none.sock: connection refused"},
		{"no credentials", "unix:///tmp/podman.sock", fakeProbe(1006, peerCred{}, errors.New("SO_PEERCRED: not supported"), ""), false, "cannot tell who serves /tmp/podman.sock: SO_PEERCRED: not supported"},
		{"ssh", "ssh://core@host:22/run/podman/podman.sock", fakeProbe(1006, peerCred{PID: 42, UID: 1006}, nil, "/usr/bin/podman"), false, "the ssh:// scheme reaches a service elsewhere"},
		{"tcp", "tcp://127.0.0.1:8080", fakeProbe(1006, peerCred{PID: 42, UID: 1006}, nil, "/usr/bin/podman"), false, "the tcp:// scheme reaches a service elsewhere"},
		{"no scheme", "/run/user/1006/podman/podman.sock", fakeProbe(1006, peerCred{PID: 42, UID: 1006}, nil, "/usr/bin/podman"), false, "is not a URI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := decideLocal(tc.uri, tc.p)
			if l.Local != tc.local || !strings.Contains(l.Why, tc.why) {
				t.Fatalf("decideLocal(%s) = %+v; want local=%v, why containing %q", tc.uri, l, tc.local, tc.why)
			}
			err := l.require(tc.uri, true, "")
			if tc.name == "nothing listens" {
				// Not a verdict: the connection's own error.
				if err == nil || errors.Is(err, ErrNotLocal) || !strings.Contains(err.Error(), "connect to podman at "+tc.uri+": connection refused") {
					t.Fatalf("require with nothing listening: %v", err)
				}
				return
			}
			if tc.local != (err == nil) || (err != nil && !errors.Is(err, ErrNotLocal)) {
				t.Fatalf("require: %v", err)
			}
			if err != nil && (!strings.Contains(err.Error(), "CONTAINER_HOST") || !strings.Contains(err.Error(), tc.uri)) {
				t.Fatalf("the refusal names neither CONTAINER_HOST nor the service: %v", err)
			}
		})
	}
}

// listen serves a unix socket from this process: its peer is this test
// binary, this uid.
func listen(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return sock
}

// TestSocketPeer reads a real listener's credentials: this process's.
func TestSocketPeer(t *testing.T) {
	cred, err := socketPeer(listen(t))
	if err != nil {
		t.Fatal(err)
	}
	if cred.UID != os.Geteuid() || cred.PID != os.Getpid() {
		t.Fatalf("peer %+v; want uid %d pid %d", cred, os.Geteuid(), os.Getpid())
	}
	// Same uid, same host, but not Podman: a forwarder's case.
	l := decideLocal("unix://"+listen(t), hostProbe)
	if l.Local || !strings.Contains(l.Why, "not by Podman") {
		t.Fatalf("a socket this test serves: %+v; want not local (not Podman)", l)
	}
}

// TestConnectRefusesBeforeAnyCall: a non-local service is refused by
// Connect itself, with ErrNotLocal, before the bindings dial it (an
// ssh:// URI would otherwise try ssh), and the trace says why.
func TestConnectRefusesBeforeAnyCall(t *testing.T) {
	var said []string
	for _, uri := range []string{"ssh://nobody@remote.test:1/run/podman/podman.sock", "tcp://127.0.0.1:1", "unix://" + listen(t)} {
		need := "it needs this test's host"
		_, err := Connect(context.Background(), Where{URI: uri, RequireLocal: true, LocalFor: need, Trace: func(s string) { said = append(said, s) }})
		if !errors.Is(err, ErrNotLocal) {
			t.Fatalf("Connect(%s): %v; want ErrNotLocal", uri, err)
		}
		var nl *NotLocalError
		if !errors.As(err, &nl) || nl.URI != uri || !nl.Env || nl.Need != need {
			t.Fatalf("Connect(%s): %#v", uri, err)
		}
		// The command's own reason is in the error, with the fix.
		if msg := err.Error(); !strings.Contains(msg, "; "+need+", so it needs your own Podman on this host") || !strings.Contains(msg, "unset CONTAINER_HOST") {
			t.Fatalf("Connect(%s): %v", uri, err)
		}
	}
	// Nothing listening: the connection's error, no verdict.
	none := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	if _, err := Connect(context.Background(), Where{URI: none, RequireLocal: true}); err == nil || errors.Is(err, ErrNotLocal) || !strings.Contains(err.Error(), "connect to podman at "+none) {
		t.Fatalf("Connect(%s) with nothing listening: %v", none, err)
	}
	if len(said) != 3 || !strings.Contains(said[0], "is not local: the ssh:// scheme reaches a service elsewhere") {
		t.Fatalf("trace: %q", said)
	}
}

// BenchmarkDecideLocal is what the decision costs a local session: one
// connect and one getsockopt, a readlink.
func BenchmarkDecideLocal(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for i := 0; i < b.N; i++ {
		decideLocal("unix://"+sock, hostProbe)
	}
}
