package engine

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakePodman stands in for `podman system service --time=0 unix://SOCK`:
// it answers the bindings' ping on SOCK, notes its start in SOCK's
// directory, and on SIGTERM closes the socket (removing it) and exits.
func fakePodman() {
	args := os.Args[1:]
	if len(args) != 4 || args[0] != "system" || args[1] != "service" || args[2] != "--time=0" || !strings.HasPrefix(args[3], "unix://") {
		fmt.Fprintf(os.Stderr, "fake podman: unexpected arguments %q\n", args)
		os.Exit(2)
	}
	sock := strings.TrimPrefix(args[3], "unix://")
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f, _ := os.OpenFile(filepath.Join(filepath.Dir(sock), "starts"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	f.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; l.Close(); os.Exit(0) }()
	http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Libpod-API-Version", "5.4.2")
		w.Write([]byte("OK"))
	}))
	os.Exit(0)
}

// fakeKeeper is `aisb internal-podman-service` with the idle time in
// $AISB_ENGINE_TEST_IDLE.
func fakeKeeper() {
	fs := flag.NewFlagSet("keeper", flag.ExitOnError)
	sock := fs.String("socket", "", "")
	fs.Parse(os.Args[1:])
	idle, _ := time.ParseDuration(os.Getenv("AISB_ENGINE_TEST_IDLE"))
	if err := Keep(context.Background(), *sock, idle, os.Stdout); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	os.Exit(0)
}

// sharedWorld is a runtime directory and a PATH whose podman is fake.
func sharedWorld(t *testing.T, idle time.Duration) Where {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "podman")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("AISB_ENGINE_TEST_KEEPER", "1")
	t.Setenv("AISB_ENGINE_TEST_IDLE", idle.String())
	rt, err := os.MkdirTemp("", "aisb-rt-") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopKeepers(t, rt); os.RemoveAll(rt) })
	return Where{RuntimeDir: rt, Keeper: []string{self}}
}

// starts lists the pids of the fake podmans started in w.
func starts(w Where) []string {
	b, _ := os.ReadFile(filepath.Join(w.RuntimeDir, "aisb", "starts"))
	return strings.Fields(string(b))
}

func alive(pid string) bool {
	var n int
	fmt.Sscan(pid, &n)
	return n > 0 && syscall.Kill(n, 0) == nil
}

// stopKeepers ends the fake podmans the test started (their keepers then
// exit): test hygiene, not part of what is tested.
func stopKeepers(t *testing.T, rt string) {
	b, _ := os.ReadFile(filepath.Join(rt, "aisb", "starts"))
	for _, pid := range strings.Fields(string(b)) {
		var n int
		fmt.Sscan(pid, &n)
		if n > 0 {
			syscall.Kill(n, syscall.SIGTERM)
		}
	}
}

func waitUntil(within time.Duration, f func() bool) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return f()
}

// TestSharedServiceOneForAll: aisb processes arriving together start one
// shared service and all use it; it stays while any of them holds it,
// however long past the idle time, and stops (socket gone) once none has
// for the idle time; the next arrival starts a new one.
func TestSharedServiceOneForAll(t *testing.T) {
	w := sharedWorld(t, time.Second)
	conns := make([]*Conn, 6)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := Connect(context.Background(), w)
			if err != nil {
				t.Error(err)
				return
			}
			conns[i] = c
		}()
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if s := starts(w); len(s) != 1 {
		t.Fatalf("six clients at once started %d services, want 1", len(s))
	}
	for _, c := range conns {
		if !c.Shared() || c.Private() || c.URI != conns[0].URI {
			t.Errorf("client: shared %v private %v at %s, want the shared service at %s", c.Shared(), c.Private(), c.URI, conns[0].URI)
		}
	}
	sock := strings.TrimPrefix(conns[0].URI, "unix://")

	// In use for three idle times by one client: the service stays.
	for _, c := range conns[1:] {
		c.Close()
	}
	time.Sleep(3 * time.Second)
	if !listening(sock) || !alive(starts(w)[0]) {
		t.Fatal("the service stopped while a client still held it")
	}
	conns[0].Close()
	if !waitUntil(5*time.Second, func() bool { return !alive(starts(w)[0]) }) {
		t.Fatal("the service still runs 5 s after its last client left (idle time 1 s)")
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("the stopped service's socket %s is still there", sock)
	}

	c, err := Connect(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := starts(w); len(s) != 2 || !alive(s[1]) {
		t.Errorf("after the idle stop: services started %v, want a second one running", s)
	}
}

// TestSharedServiceStaleSocket: a socket left by a service that died (its
// keeper killed) is replaced by a new service.
func TestSharedServiceStaleSocket(t *testing.T) {
	w := sharedWorld(t, time.Minute)
	c, err := Connect(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	sock := strings.TrimPrefix(c.URI, "unix://")
	c.Close()
	var pid int
	fmt.Sscan(starts(w)[0], &pid)
	syscall.Kill(pid, syscall.SIGKILL) // no clean-up: the socket file stays
	waitUntil(5*time.Second, func() bool { return !alive(starts(w)[0]) })
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("the killed service's socket is gone (%v): nothing stale to test", err)
	}
	c, err = Connect(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := starts(w); len(s) != 2 || !alive(s[1]) || !listening(sock) {
		t.Errorf("after the stale socket: services started %v, want a second one listening", s)
	}
}

// TestSharedServiceHoldsNoCallerDescriptor: a pipe aisb inherited without
// close-on-exec (a shell's, make's) reaches its end when aisb lets go of
// it, although the keeper and its service live on.
func TestSharedServiceHoldsNoCallerDescriptor(t *testing.T) {
	w := sharedWorld(t, time.Minute)
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil { // no O_CLOEXEC, as inherited
		t.Fatal(err)
	}
	r := os.NewFile(uintptr(p[0]), "r")
	defer r.Close()
	syscall.CloseOnExec(p[0])
	c, err := Connect(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	syscall.Close(p[1])
	done := make(chan error, 1)
	go func() { _, err := r.Read(make([]byte, 1)); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("read a byte from a pipe nobody writes to")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the pipe's write end lives on in the keeper or its service")
	}
	if !alive(starts(w)[0]) {
		t.Fatal("the service is not running: the test proves nothing")
	}
}

// TestSharedServiceDirMustBePrivate: the directory holding the socket is
// the user's and closed to others, or aisb refuses to use it.
func TestSharedServiceDirMustBePrivate(t *testing.T) {
	w := sharedWorld(t, time.Minute)
	dir := filepath.Join(w.RuntimeDir, "aisb")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	if _, err := Connect(context.Background(), w); err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Errorf("a 0755 directory: %v, want a refusal naming chmod 700", err)
	}
	os.Remove(dir)
	other := t.TempDir()
	if err := os.Symlink(other, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Connect(context.Background(), w); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a symlink: %v, want a refusal", err)
	}
	if len(starts(w)) != 0 {
		t.Errorf("a service was started: %v", starts(w))
	}
	// Control: the same, private, is used.
	os.Remove(dir)
	c, err := Connect(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestSharedKey: a variable that changes what Podman does gives another
// service; one that does not, the same.
func TestSharedKey(t *testing.T) {
	base := []string{"PATH=/usr/bin", "HOME=/home/u", "XDG_CONFIG_HOME=/home/u/.config", "PWD=/p", "AISB_TRACE=1"}
	k := sharedKey("/usr/bin/podman", base)
	if k != sharedKey("/usr/bin/podman", append([]string{"PWD=/q", "TERM=xterm", "AISB_TRACE="}, base[:3]...)) {
		t.Error("the working directory, terminal or aisb's own variables changed the key")
	}
	for _, kv := range []string{"CONTAINERS_CONF_OVERRIDE=/x", "CONTAINERS_STORAGE_CONF=/y", "XDG_DATA_HOME=/d", "PODMAN_IGNORE_CGROUPSV1_WARNING=1", "STORAGE_DRIVER=vfs", "https_proxy=http://p"} {
		if sharedKey("/usr/bin/podman", append(base, kv)) == k {
			t.Errorf("%s did not change the key", kv)
		}
	}
	if sharedKey("/usr/local/bin/podman", base) == k {
		t.Error("another podman binary did not change the key")
	}
}
