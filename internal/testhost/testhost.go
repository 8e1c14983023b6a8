// Package testhost gives integration tests the test host that
// tests/host/setup.sh prepares: the rootless test user, the offline base image,
// the test upstream and its logs, and a skip helper that cannot hide a regression.
package testhost

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// User is the unprivileged test user this test process drives Podman as:
// AISB_TEST_USER, or aisbtest. tests/host/setup.sh prepares three (env.sh
// names them); `make test` runs the tests that must be alone on one uid as
// the second, and the harnesses' agent loops as the third, beside the
// others (tests/run.sh).
var User = cmp.Or(os.Getenv("AISB_TEST_USER"), "aisbtest")

// Names shared with tests/host/env.sh.
const (
	BaseImage    = "localhost/aisb-base:trixie"
	UpstreamAddr = "198.51.100.10"   // HTTP 80/8080, HTTPS 443, banner 22, UDP echo 9999, DNS 53
	Upstream6    = "2001:db8:77::10" // the same host over IPv6
	HostSelf     = "198.51.100.1"    // the root namespace's end of the veth: "the host's own address"
	StateDir     = "/run/aisb-upstream"
)

// Internal addresses given to the upstream's namespace, one per internal range,
// so a refusal test only ever reaches our own host.
var Internal = map[string]string{
	"private":    "10.255.77.10",
	"private172": "172.31.77.10",
	"private192": "192.168.77.10",
	"metadata":   "169.254.77.10",
	"cgnat":      "100.64.77.10",
}

// Integration reports whether the README's test command is running us; then a
// host that is not prepared is a failure, never a skip.
func Integration() bool { return os.Getenv("AISB_INTEGRATION") == "1" }

// UnitOnly reports whether integration tests were asked not to run at all
// (`make test-unit` sets AISB_INTEGRATION=0): then even a prepared host, as
// root, runs no container, so unit runs never compete with integration ones.
func UnitOnly() bool { return os.Getenv("AISB_INTEGRATION") == "0" }

// Skip skips the test with reason, unless AISB_INTEGRATION=1, when it fails it:
// under the test command every integration test must really run.
func Skip(t testing.TB, reason string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(reason, args...)
	if Integration() {
		t.Fatalf("integration test cannot run (AISB_INTEGRATION=1 makes this a failure): %s", msg)
	}
	t.Skipf("%s (run `make test` to prepare the host)", msg)
}

var (
	prepOnce sync.Once
	prepErr  string
)

// Require checks that the host is prepared for rootless container tests.
func Require(t testing.TB) {
	t.Helper()
	if UnitOnly() {
		t.Skip("integration test: AISB_INTEGRATION=0 (make test-unit) runs unit tests only")
	}
	prepOnce.Do(func() { prepErr = prepared() })
	if prepErr != "" {
		Skip(t, "%s", prepErr)
	}
}

// RequireRoot checks that the test runs as root (for network namespaces).
func RequireRoot(t testing.TB) {
	t.Helper()
	if UnitOnly() {
		t.Skip("integration test: AISB_INTEGRATION=0 (make test-unit) runs unit tests only")
	}
	if os.Geteuid() != 0 {
		Skip(t, "needs root to create network namespaces")
	}
}

func prepared() string {
	if os.Geteuid() != 0 {
		return "integration tests run as root and drive podman as " + User
	}
	if _, err := user.Lookup(User); err != nil {
		return "test user " + User + " does not exist"
	}
	out, err := UserCommand(context.Background(), "podman", "image", "exists", BaseImage).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("base image %s missing: %v %s", BaseImage, err, out)
	}
	if out, err := exec.Command("bash", RepoPath("tests/host/upstream.sh"), "status").CombinedOutput(); err != nil {
		return fmt.Sprintf("test upstream is not healthy: %s", out)
	}
	return ""
}

// RepoPath returns a path inside the repository.
func RepoPath(rel string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", rel)
}

// UserEnv is the clean environment rootless podman runs with as the test user.
func UserEnv() []string {
	u, err := user.Lookup(User)
	if err != nil {
		return nil
	}
	return []string{
		"HOME=" + u.HomeDir, "USER=" + User,
		"XDG_RUNTIME_DIR=/run/user/" + u.Uid,
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
		"PODMAN_IGNORE_CGROUPSV1_WARNING=1",
	}
}

// UserCommand runs argv as the test user with UserEnv.
func UserCommand(ctx context.Context, argv ...string) *exec.Cmd {
	args := append([]string{"-u", User, "--", "env", "-i"}, UserEnv()...)
	cmd := exec.CommandContext(ctx, "runuser", append(args, argv...)...)
	cmd.Dir = "/"
	return cmd
}

// Result is what a command printed and how it ended.
type Result struct {
	Stdout, Stderr string
	Code           int
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
}

// Run runs cmd to completion and reports its result; a failure to start at
// all fails the test. Bound it with a context (UserCommand takes one).
func Run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	return r
}

// Podman runs podman as the test user.
func Podman(t testing.TB, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return Run(t, UserCommand(ctx, append([]string{"podman"}, args...)...))
}

// binDirs holds each test's binary directory: binaries a test builds land
// side by side (aisb finds aisb-entrypoint next to itself).
var binDirs sync.Map // testing.TB -> string

// binDir is t's binary directory, made on first use and removed when t
// ends. Not t.TempDir: its parent is private to root, and the test user and
// the agent must reach the binaries.
func binDir(t testing.TB) string {
	t.Helper()
	if d, ok := binDirs.Load(t); ok {
		return d.(string)
	}
	dir, err := os.MkdirTemp("", "aisb-test-bin-")
	if err != nil {
		t.Fatal(err)
	}
	binDirs.Store(t, dir)
	t.Cleanup(func() { binDirs.Delete(t); os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Binary builds the static Go program in the package pkg (relative to the
// repository) into the test's binary directory and returns its path, with
// the build tags of the test binary itself (Tags). Go's build cache makes a
// rebuild a relink (3-4 s for aisb on a 2-core VM); where ShareBuilds is on,
// each program is built once per test process and copied into the test's
// directory.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	tags := Tags()
	out := filepath.Join(binDir(t), filepath.Base(pkg))
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if src, ok := sharedBuild(t, pkg, tags); ok {
		if err := copyFile(src, out); err != nil {
			t.Fatalf("copy %s: %v", pkg, err)
		}
		return out
	}
	if err := build(pkg, tags, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Tags are the build tags this test binary was built with: the Makefile's
// TAGS, the one place they are written (the podman bindings build without
// cgo only with them). The programs a test builds get the same.
func Tags() []string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	for _, s := range bi.Settings {
		if s.Key == "-tags" && s.Value != "" {
			return strings.Split(s.Value, ",")
		}
	}
	return nil
}

func build(pkg string, tags []string, out string) error {
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, " "))
	}
	cmd := exec.Command("go", append(args, "./"+pkg)...)
	cmd.Dir = RepoPath(".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// shared holds the builds of ShareBuilds: one per package and tags.
var shared struct {
	sync.Mutex
	dir    string // "" while ShareBuilds is off
	builds map[string]*sharedProgram
}

type sharedProgram struct {
	once sync.Once
	path string
	err  error
}

// ShareBuilds makes Binary build each program once for the whole test
// process (a package's TestMain calls it; tests running side by side then
// do not each relink aisb) and returns the function that removes those
// builds, for TestMain to call after the tests.
func ShareBuilds() (remove func(), err error) {
	dir, err := os.MkdirTemp("", "aisb-test-builds-")
	if err != nil {
		return nil, err
	}
	shared.Lock()
	shared.dir, shared.builds = dir, map[string]*sharedProgram{}
	shared.Unlock()
	return func() { os.RemoveAll(dir) }, nil
}

// sharedBuild returns the process's build of pkg, building it on first use;
// ok is false where ShareBuilds is off.
func sharedBuild(t testing.TB, pkg string, tags []string) (path string, ok bool) {
	t.Helper()
	shared.Lock()
	if shared.dir == "" {
		shared.Unlock()
		return "", false
	}
	key := pkg + " " + strings.Join(tags, " ")
	p := shared.builds[key]
	if p == nil {
		p = &sharedProgram{path: filepath.Join(shared.dir, strconv.Itoa(len(shared.builds)), filepath.Base(pkg))}
		shared.builds[key] = p
	}
	shared.Unlock()
	p.once.Do(func() {
		if p.err = os.MkdirAll(filepath.Dir(p.path), 0o755); p.err == nil {
			p.err = build(pkg, tags, p.path)
		}
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.path, true
}

// copyFile copies the executable src to dst (a copy, not a link: a test may
// change its own binary without touching another's).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// DNSQueries returns the names the upstream's resolver was asked for since
// mark (from DNSMark).
func DNSQueries(t testing.TB, mark int64) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(StateDir, "dns.log"))
	if err != nil {
		t.Fatalf("read the upstream's DNS log: %v", err)
	}
	if int64(len(b)) < mark {
		mark = 0
	}
	var names []string
	for _, line := range strings.Split(string(b[mark:]), "\n") {
		// dnsmasq: "... query[A] name from 198.51.100.1"
		if i := strings.Index(line, "query["); i >= 0 {
			f := strings.Fields(line[i:])
			if len(f) >= 2 {
				names = append(names, f[1])
			}
		}
	}
	return names
}

// DNSMark is the current end of the upstream's DNS log.
func DNSMark(t testing.TB) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(StateDir, "dns.log"))
	if err != nil {
		t.Fatalf("stat the upstream's DNS log: %v", err)
	}
	return fi.Size()
}

// Service starts `podman system service` as the test user and returns its
// URI, for code that drives Podman through the bindings (set it as
// CONTAINER_HOST); it is stopped when the test ends.
func Service(t testing.TB) string {
	t.Helper()
	return ServiceWith(t, nil)
}

// ServiceWith starts a service with extra environment (say, a PATH without
// pasta), stopped when the test ends.
func ServiceWith(t testing.TB, env []string) string {
	t.Helper()
	Require(t)
	uri, cmd := startService(t, env)
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	return uri
}

func startService(t testing.TB, env []string) (string, *exec.Cmd) {
	t.Helper()
	u, err := user.Lookup(User)
	if err != nil {
		t.Fatal(err)
	}
	sock := fmt.Sprintf("/run/user/%s/aisb-test-%d-%d.sock", u.Uid, os.Getpid(), time.Now().UnixNano())
	cmd := UserCommand(context.Background(), append(env, "podman", "system", "service", "--time=0", "unix://"+sock)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start podman service: %v", err)
	}
	// A minute: with three tests side by side on 2 cores (builds among
	// them), a service once took over 10 s to come up.
	if err := WaitFor(time.Minute, func() error { _, err := os.Stat(sock); return err }); err != nil {
		cmd.Process.Kill()
		t.Fatalf("podman service socket did not appear: %v", err)
	}
	return "unix://" + sock, cmd
}

// UserDir is a temporary directory owned by the test user.
func UserDir(t testing.TB) string {
	t.Helper()
	u, err := user.Lookup(User)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "aisb-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	return dir
}

// AgentDir is a temporary directory every user can write, for files that
// uid 1000 (the agent) or a container's user must read or create.
func AgentDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "aisb-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ServeHTTP80 serves a marker page on addr:80 until the test ends. The
// host's own loopback and its own address get a service this way, so a
// refusal test has a control: a gate that failed would visibly reach it.
// Tests of several packages and lanes serve it at once (tests/run.sh): each
// listener shares the port (SO_REUSEPORT) and serves the same page.
func ServeHTTP80(t testing.TB, addr string) {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort(addr, "80"))
	if err != nil {
		t.Fatalf("listen on %s:80 for a control: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "host service") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// WaitFor calls cond every 50 ms until it returns nil or within has passed;
// it returns nil, or cond's last error, saying how long it waited. Tests
// poll with it instead of deadline loops of their own, so a timeout says
// what was still wrong.
func WaitFor(within time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("after %v: %w", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
