// Package doctor measures this host's isolation live, the way the test suite
// does, so a user can re-check aisb's model on a new machine before trusting it.
package doctor

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containers/podman/v5/libpod/define"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/gate/squidconf"
	"github.com/aisb-dev/aisb/internal/allowlist"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/image"
	"github.com/aisb-dev/aisb/internal/netaddr"
	"github.com/aisb-dev/aisb/internal/reaper"
	"github.com/aisb-dev/aisb/internal/safefile"
	"github.com/aisb-dev/aisb/internal/sandbox"
	"github.com/aisb-dev/aisb/internal/state"
)

// Statuses.
const (
	Pass = "PASS"
	Warn = "WARN"
	Fail = "FAIL"
)

// Check is one finding.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// Options for a doctor run.
type Options struct {
	BaseImage  string
	Helper     string // "" to detect, as aisb run does
	Entrypoint string // the aisb-entrypoint binary ($AISB_ENTRYPOINT); "": found for the engine
	GateHelper string // the aisb-gatehelper binary ($AISB_GATEHELPER), for a remote gate's probe; "": found for the engine
	Where      engine.Where
	Paths      state.Paths
	Logf       func(format string, args ...any)
	Builds     image.Output // image builds' progress

	// projectVolume is the sandbox checks' project on an engine that is
	// not local (remote.go); "": the directory is bind-mounted.
	projectVolume string
}

// Report collects checks in order.
type Report struct{ Checks []Check }

func (r *Report) add(name, status, format string, args ...any) {
	r.Checks = append(r.Checks, Check{name, status, fmt.Sprintf(format, args...)})
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool {
	return slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Status == Fail })
}

// Run performs every check it can; a failure early (no Podman) ends it.
// An engine that is not local is checked there, through its API
// (remote.go).
func Run(ctx context.Context, o Options) *Report {
	r := &Report{}
	c, err := engine.Connect(ctx, o.Where)
	if err != nil {
		r.add("podman", Fail, "%v", err)
		return r
	}
	defer c.Close()
	r.add("podman", Pass, "Podman %s through its API (%s)", c.Version, c.How())
	loc := c.Locality()
	remote := !loc.Local
	if remote {
		// The sweep judges containers by this host's processes: not there.
		r.add("engine", Warn, "%s is not local (%s): the checks below are that engine's, made through its API as a session there is (docs/remote.md says what a gate there does not check); this host's runtime directory is not checked",
			c.Address(), loc.Why)
	} else {
		reaper.Reap(c, o.Logf)
	}

	info, err := c.Info(ctx)
	if err != nil {
		r.add("podman info", Fail, "%v", err)
		return r
	}
	helper, err := sandbox.DetectHelper(c, o.Helper)
	switch {
	case err != nil:
		r.add("network helper", Fail, "%v", err)
	case helper == sandbox.Pasta:
		r.add("network helper", Pass, "pasta (%s): the host's loopback mapped at %s", info.Host.Pasta.Executable, sandbox.MappedHost(helper))
	default:
		r.add("network helper", Warn, "slirp4netns (pasta unavailable): works, gate at %s; install passt for pasta", sandbox.MappedHost(helper))
	}
	rootless(r, info, o.Paths.Runtime, remote)
	if err != nil {
		return r
	}
	if remote {
		remoteGate(ctx, r, c, o)
	} else {
		squidParses(r, c, o)
	}
	sandboxChecks(ctx, r, c, o, helper, remote)
	return r
}

// rootless checks the rootless set-up: this host's subordinate ids and
// runtime directory for a local engine, the engine's user namespace for
// one that is not (its runtime directory is its host's).
func rootless(r *Report, info *define.Info, rd string, remote bool) {
	if remote {
		engineIDs(r, info)
	} else {
		localRootless(r, rd)
	}
	if d := info.Store.GraphDriverName; d == "overlay" {
		r.add("storage driver", Pass, "overlay")
	} else {
		r.add("storage driver", Warn, "%s: slow and large; set driver = \"overlay\" in ~/.config/containers/storage.conf", d)
	}
	v2 := info.Host.CgroupsVersion == "v2"
	if v2 && slices.Contains(info.Host.CgroupControllers, "memory") && slices.Contains(info.Host.CgroupControllers, "pids") {
		r.add("resource limits", Pass, "cgroup v2 with memory and pids controllers: --pids, --memory, --cpus are enforced")
	} else {
		r.add("resource limits", Warn, "cgroup %s rootless: Podman would ignore --pids, --memory and --cpus, so aisb refuses them unless --rlimit-fallback (nproc, data, cpu seconds)", info.Host.CgroupsVersion)
	}
}

func localRootless(r *Report, rd string) {
	u, err := user.Current()
	if err == nil {
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			if n := subordinate(f, u); n >= 65536 {
				r.add("subordinate ids", Pass, "%s: %d ids for %s", f, n, u.Username)
			} else {
				r.add("subordinate ids", Fail, "%s: %d ids for %s; add a range of 65536 (usermod --add-subuids/--add-subgids)", f, n, u.Username)
			}
		}
	}
	if fi, err := os.Stat(rd); err != nil || !fi.IsDir() {
		r.add("runtime dir", Warn, "%q is not a directory; rootless Podman needs one (set XDG_RUNTIME_DIR, usually /run/user/UID)", rd)
	} else {
		r.add("runtime dir", Pass, "%s", rd)
	}
}

// subordinate counts the ids f grants to u (by name or uid).
func subordinate(f string, u *user.User) int {
	file, err := os.Open(f)
	if err != nil {
		return 0
	}
	defer file.Close()
	n := 0
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		p := strings.Split(sc.Text(), ":")
		if len(p) == 3 && (p[0] == u.Username || p[0] == u.Uid) {
			c, _ := strconv.Atoi(p[2])
			n += c
		}
	}
	return n
}

func squidParses(r *Report, c engine.Engine, o Options) {
	img, _, err := image.Ensure(c, gate.ImageSpec(o.BaseImage), image.Build{LockDir: o.Paths.LockDir(), Output: o.Builds, Logf: o.Logf})
	if err != nil {
		r.add("gate config", Fail, "gate image: %v", err)
		return
	}
	dir, err := os.MkdirTemp("", "aisb-doctor-")
	if err != nil {
		r.add("gate config", Fail, "%v", err)
		return
	}
	defer os.RemoveAll(dir)
	hosts, _ := allowlist.Parse([]string{"api.example.com", ".example.org", "192.0.2.7"})
	host, err := netaddr.HostAddrs()
	var conf string
	if err == nil {
		// squid -k parse runs as the image's proxy user.
		err = os.Chmod(dir, 0o777)
	}
	if err == nil {
		var tokens squidconf.Tokens
		if tokens, err = squidconf.NewTokens(); err == nil {
			conf, err = squidconf.Render(squidconf.Config{Session: "doctor", Port: 3128, TLSPort: 3129, Dir: "/gate", Allowlist: hosts, Host: host, Tokens: tokens})
		}
	}
	if err == nil {
		// The TLS port's certificate must exist for squid to parse the file,
		// readable by the image's proxy user: a throw-away CA nobody trusts,
		// removed with the directory.
		_, _, err = gate.WriteTLSFiles(dir, nil, nil)
	}
	if err == nil {
		err = filepath.WalkDir(filepath.Join(dir, "tls"), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return os.Chmod(p, 0o755)
			}
			return os.Chmod(p, 0o644)
		})
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "squid.conf"), []byte(conf), 0o644)
	}
	if err == nil {
		// Whatever the user's umask.
		err = os.Chmod(filepath.Join(dir, "squid.conf"), 0o644)
	}
	if err != nil {
		r.add("gate config", Fail, "%v", err)
		return
	}
	code, err := engine.RunOnce(context.TODO(), c, img, dir, "/gate", []string{"sh", "-c", "squid -k parse -f /gate/squid.conf > /gate/parse.log 2>&1"})
	out, _ := safefile.Read(filepath.Join(dir, "parse.log"), 1<<20) // the directory is open to all (squid -k parse runs as the proxy user)
	if err != nil || code != 0 {
		r.add("gate config", Fail, "squid -k parse: exit %d %v: %s", code, err, lastLines(out))
		return
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "HTTP requires the use of Via") {
			continue
		}
		for _, bad := range []string{"ERROR", "FATAL", "WARNING", "NOTICE", "UPGRADE", "UNRECOGNIZED"} {
			if strings.Contains(l, bad) {
				r.add("gate config", Fail, "squid -k parse: %s", strings.TrimSpace(l))
				return
			}
		}
	}
	r.add("gate config", Pass, "a generated squid.conf parses cleanly in the gate image")
}

func lastLines(b []byte) string {
	l := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(l) > 3 {
		l = l[len(l)-3:]
	}
	return strings.Join(l, "; ")
}
