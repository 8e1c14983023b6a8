package tests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/internal/testhost"
)

// TestRemoteSharedPath (issue #29 item 2): an engine that is not local but
// sees this host's paths — the caller's own Podman behind a same-user
// forwarder, which is what podman machine's gvproxy is on a Mac — is shown
// to see the project by the path check (a container there read aisb's
// token and wrote beside it, as the caller), so the project is
// bind-mounted as on a local engine: the agent's file is in the project at
// once, the caller's, and there is no review session; the rest still goes
// through the API (the allowed name answers through the gate, the refused
// one gets 403 and is never resolved, both are in the caller's audit).
// The check leaves nothing in the project. The control, an engine that
// does not see the path (another user's), is TestRemoteRun's: "not
// shared" there, and the copy; its "none" case is the engine that sees the
// directory but would write the agent's files as another uid.
func TestRemoteSharedPath(t *testing.T) {
	parallel(t)
	base := testBaseImage(t)
	began := time.Now()
	a := newAisb(t, base, dnsConfig())
	own := strings.TrimPrefix(a.service(t), "unix://")
	fwd := startForwarder(t, own)
	a.host = "unix://" + fwd
	testhost.WriteUserFile(t, filepath.Join(a.project, "kept.txt"), "from the caller\n")

	mark := testhost.DNSMark(t)
	start := time.Now()
	r := a.runEnv(t, []string{"AISB_TRACE=1"}, "run", "--allow", "shared.test", "--harness", "shell", "--", "sh", "-c",
		"cat kept.txt; echo agent > shared.txt; "+
			"curl -sSk --max-time 10 -o /dev/null -w 'allowed=%{http_code}\\n' https://shared.test/; "+
			"curl -sSk --max-time 10 -o /dev/null -w 'refusedname=%{http_connect}\\n' https://sharedrefused.test/")
	t.Logf("aisb run through a same-user forwarder to %s's own Podman: exit %d in %v", testhost.User, r.Code, time.Since(start).Round(time.Millisecond))
	for _, want := range []string{"from the caller", "allowed=200", "refusedname=403"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("run --allow shared.test: want %q: %s", want, r)
		}
	}
	for _, want := range []string{"trace: engine at " + a.host + " is not local", "engine not local",
		"project path checked on the engine: shared (a container there read the token aisb wrote into it",
		"podman is not local but sees the project at the same path", "is bind-mounted read-write at /project"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("run: stderr lacks %q: %s", want, r.Stderr)
		}
	}
	for _, unwanted := range []string{"this is a review session", "project copied to the engine", "project volume created"} {
		if strings.Contains(r.Stderr, unwanted) {
			t.Errorf("run: stderr says %q: %s", unwanted, r.Stderr)
		}
	}
	for _, l := range strings.Split(r.Stderr, "\n") {
		if strings.Contains(l, "project path checked") || strings.Contains(l, "gate ready") || strings.Contains(l, "trace:") && strings.Contains(l, "done") {
			t.Logf("%s", l)
		}
	}
	// The agent's file is in the project directly, and the caller's.
	fi, err := os.Lstat(filepath.Join(a.project, "shared.txt"))
	if err != nil {
		t.Fatalf("the agent's file is not in the project: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(a.project, "shared.txt")); string(b) != "agent\n" {
		t.Errorf("shared.txt is %q", b)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != userUID() {
		t.Errorf("the agent's file is uid %d's, not the caller's (%d)", uid, userUID())
	}
	ents, _ := os.ReadDir(a.project)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".aisb-pathcheck") {
			t.Errorf("the path check left %s in the project", e.Name())
		}
	}
	if rv := a.run(t, "review"); rv.Code == 0 || !strings.Contains(rv.Stderr, "no review session") {
		t.Errorf("aisb review after a shared session: %s", rv)
	}
	if slices.Contains(testhost.DNSQueries(t, mark), "sharedrefused.test") {
		t.Errorf("the refused name sharedrefused.test was resolved")
	}
	au := a.run(t, "audit")
	for _, want := range []string{"ALLOWED  CONNECT shared.test:443  200", "BLOCKED  CONNECT sharedrefused.test:443  403"} {
		if !strings.Contains(au.Stdout, want) {
			t.Errorf("aisb audit lacks %q: %s", want, au)
		}
	}
	if left := a.containers(t); len(left) > 0 {
		t.Errorf("left after the session: %v", left)
	}
	t.Logf("TestRemoteSharedPath's own work: %v", time.Since(began).Round(time.Millisecond))
}
