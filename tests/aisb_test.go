package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate/audit"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// aisbUser runs the real aisb binary as the test user, in a project directory
// of its own, with its own config and state directories.
type aisbUser struct {
	bin     string
	project string
	config  string   // XDG_CONFIG_HOME
	state   string   // XDG_STATE_HOME
	base    string   // AISB_BASE_IMAGE
	helpers []string // AISB_ENTRYPOINT=…, AISB_GATEHELPER=…: each binary is built in a directory of its own
	private bool     // no CONTAINER_HOST: aisb starts its own podman service
	host    string   // CONTAINER_HOST instead of the test's own service
	env     []string // variables for every invocation (an ssh:// engine's key and known_hosts)
	svc     *services
}

// services are the Podman services an aisbUser's invocations use: one per
// test (or subtest), started on first use, as a user's service serves all
// of their sessions. A service per invocation, kept until the test ended,
// had some twenty services running with tests side by side, and their
// starts took over 10 s.
type services struct {
	mu  sync.Mutex
	uri map[*testing.T]string
}

// service is t's Podman service for a. Before it is stopped, when t ends,
// a's sessions' watchdogs get to finish their gates and sandboxes: a session
// must not leave containers for another test's aisb to reap.
func (a *aisbUser) service(t *testing.T) string {
	a.svc.mu.Lock()
	defer a.svc.mu.Unlock()
	if uri, ok := a.svc.uri[t]; ok {
		return uri
	}
	uri := testhost.Service(t)
	t.Cleanup(func() { a.settle(t) }) // runs before the service's own cleanup
	a.svc.uri[t] = uri
	return uri
}

// settle waits (up to 10 s) until no container of a's sessions remains.
func (a *aisbUser) settle(t *testing.T) {
	waitFor(10*time.Second, func() bool { return len(a.containers(t)) == 0 })
}

func newAisb(t *testing.T, base, configTOML string) *aisbUser {
	t.Helper()
	h := testhost.NewAisb(t, base)
	a := &aisbUser{bin: h.Bin, project: h.Project, config: h.Config, state: h.State, base: h.Base, helpers: h.Helpers,
		svc: &services{uri: map[*testing.T]string{}}}
	t.Cleanup(func() { removeStateVolumes(t, a.project) })
	if configTOML != "" {
		writeUserFile(t, filepath.Join(a.config, "aisb", "config.toml"), configTOML)
	}
	return a
}

// writeUserFile writes a file (and its directory) owned by the test user.
func writeUserFile(t *testing.T, path, content string) {
	t.Helper()
	testhost.WriteUserFile(t, path, content)
}

// harness is a as testhost runs aisb (tests and benchmarks share it); a's
// fields are its own, as tests change them.
func (a *aisbUser) harness() testhost.Aisb {
	return testhost.Aisb{Bin: a.bin, Project: a.project, Config: a.config, State: a.state, Base: a.base, Helpers: a.helpers}
}

// containerHost is the CONTAINER_HOST a's invocations in t use: a.host, the test's
// own service, or none (a.private: aisb starts its own).
func (a *aisbUser) containerHost(t *testing.T) string {
	switch {
	case a.host != "":
		return a.host
	case !a.private:
		return a.service(t)
	}
	return ""
}

func (a *aisbUser) command(t *testing.T, ctx context.Context, args ...string) []string {
	return a.harness().Argv(a.containerHost(t), args...)
}

// run runs aisb with args in the project directory and waits for it.
func (a *aisbUser) run(t *testing.T, args ...string) testhost.Result {
	t.Helper()
	return a.runEnv(t, nil, args...)
}

// runEnv is run with extra variables in aisb's own environment. They go
// through a file the shell sources, never through any command line.
func (a *aisbUser) runEnv(t *testing.T, env []string, args ...string) testhost.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return testhost.Run(t, a.harness().Command(t, ctx, a.containerHost(t), append(slices.Clip(a.env), env...), args...))
}

// containers are the names of the containers of a's sessions, those
// matching every filter (podman ps --filter) given too; other tests'
// sessions may be running beside them.
func (a *aisbUser) containers(t *testing.T, filters ...string) []string {
	t.Helper()
	var names []string
	for _, id := range a.sessionIDs(t) {
		args := []string{"ps", "-a", "--filter", "label=" + engine.LabelSession + "=" + id, "--format", "{{.Names}}"}
		for _, f := range filters {
			args = append(args, "--filter", f)
		}
		names = append(names, strings.Fields(testhost.Podman(t, args...).Stdout)...)
	}
	return names
}

// sessionIDs are the ids of a's sessions so far, from its state directory.
func (a *aisbUser) sessionIDs(t *testing.T) []string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(a.state, "aisb", "sessions", "*"))
	var ids []string
	for _, d := range dirs {
		ids = append(ids, filepath.Base(d))
	}
	return ids
}

// events reads every audit event aisb wrote, once each session's audit is
// complete (a session's watchdog adds its last requests after aisb exits).
func (a *aisbUser) events(t *testing.T) []audit.Event {
	t.Helper()
	dir := filepath.Join(a.state, "aisb", "audit")
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var out []audit.Event
	for _, f := range files {
		if err := audit.WaitAudit(dir, strings.TrimSuffix(filepath.Base(f), ".jsonl"), 5*time.Second); err != nil {
			t.Fatalf("audit %s: %v", f, err)
		}
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l == "" {
				continue
			}
			var e audit.Event
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("audit line %q: %v", l, err)
			}
			out = append(out, e)
		}
	}
	return out
}

var (
	testBaseOnce sync.Once
	testBase     string
	testBaseErr  string
)

// testBaseImage is the offline base plus the probe at /usr/local/bin/probe and
// a setuid-root copy at /usr/local/bin/probe-suid, for the escape battery. The
// sandbox image is built on it exactly as on any other base.
//
// Its tag is the hash of what goes into it, and it is built at most once
// per test user across make test's processes (a lock file): two builds of
// it would be two images of two IDs, and every session image built on each
// a family of its own (Podman's copy of each for the sandbox's user ids,
// ~600 MB, and the remote engines' pi image twice).
func testBaseImage(t *testing.T) string {
	t.Helper()
	testhost.Require(t)
	probe := testhost.Binary(t, "tests/probe")
	testBaseOnce.Do(func() { testBase, testBaseErr = buildTestBase(t, probe) })
	if testBaseErr != "" {
		t.Fatalf("build the test base image: %s", testBaseErr)
	}
	return testBase
}

func buildTestBase(t *testing.T, probe string) (string, string) {
	b, err := os.ReadFile(probe)
	if err != nil {
		return "", err.Error()
	}
	// Without the base's documentation, manual pages and message
	// catalogues (92 of its 648 MB, read by no test): Podman's copy of
	// every image built on it for the sandbox's user ids copies only
	// what the image shows.
	cf := `FROM ` + testhost.BaseImage + `
COPY probe /usr/local/bin/probe
COPY probe /usr/local/bin/probe-suid
RUN chown root:root /usr/local/bin/probe-suid && chmod 4755 /usr/local/bin/probe-suid && \
    rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/locale/* /usr/share/info/*
`
	base := strings.TrimSpace(testhost.Podman(t, "image", "inspect", "--format", "{{.Id}}", testhost.BaseImage).Stdout)
	sum := sha256.Sum256([]byte(base + "\n" + cf + "\n" + string(b)))
	tag := "localhost/aisb-testbase:" + hex.EncodeToString(sum[:6])
	release, _, err := buildLockFile(filepath.Join(os.TempDir(), "aisb-test-testbase-"+testhost.User+".lock")).hold(syscall.LOCK_EX)
	if err != nil {
		return "", err.Error()
	}
	defer release()
	if testhost.Podman(t, "image", "exists", tag).Code == 0 {
		return tag, ""
	}
	dir, err := os.MkdirTemp("", "aisb-testbase-")
	if err != nil {
		return "", err.Error()
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "probe"), b, 0o755)
	os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(cf), 0o644)
	if r := testhost.Podman(t, "build", "-q", "-t", tag, dir); r.Code != 0 {
		return "", r.String()
	}
	return tag, ""
}

// script runs each case with sh and prints "RESULT NAME CODE OUTPUT" per case.
type scriptCase struct {
	name string
	argv string // shell words, run as is
}

func renderScript(cases []scriptCase) string {
	var b bytes.Buffer
	b.WriteString("#!/bin/sh\n")
	b.WriteString("gate=${HTTP_PROXY##*@}\n") // the proxy URL holds the gate's token before the @
	for _, c := range cases {
		fmt.Fprintf(&b, "out=$(%s 2>&1); code=$?; printf 'RESULT %%s %%d %%s\\n' %q \"$code\" \"$(printf %%s \"$out\" | tr '\\n' ' ' | cut -c1-300)\"\n", c.argv, c.name)
	}
	return b.String()
}

type caseResult struct {
	code int
	out  string
}

func parseResults(t *testing.T, stdout string) map[string]caseResult {
	t.Helper()
	res := map[string]caseResult{}
	for _, l := range strings.Split(stdout, "\n") {
		rest, ok := strings.CutPrefix(l, "RESULT ")
		if !ok {
			continue
		}
		f := strings.SplitN(rest, " ", 3)
		if len(f) < 2 {
			continue
		}
		code, _ := strconv.Atoi(f[1])
		out := ""
		if len(f) == 3 {
			out = f[2]
		}
		res[f[0]] = caseResult{code, out}
	}
	return res
}
