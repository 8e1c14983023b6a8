package bench

// This file is over 300 lines because it is one inventory: what a user's
// sessions can leave (containers, volumes, namespaces, processes, ports,
// live state, secrets), taken before and after BenchmarkScale's burst, and
// the memory of what runs while the burst is up; split, the before and the
// after would drift apart.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aisb-dev/aisb/gate"
	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/state"
	"github.com/aisb-dev/aisb/internal/testhost"
)

// A proc is one process of the machine as /proc shows it.
type proc struct {
	pid, ppid     int
	uid           uint32
	comm, cmdline string
	state         string // "R", "S", "Z"…
	pidNS, netNS  string // "pid:[INODE]", "net:[INODE]"
	rssMB, pssMB  float64
}

// processes lists the machine's processes; with memory, their VmRSS and
// their PSS (smaps_rollup, which shares a shared page among its users).
func processes(memory bool) []proc {
	entries, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		fi, err := os.Stat(dir)
		if err != nil {
			continue
		}
		p := proc{pid: pid, uid: fi.Sys().(*syscall.Stat_t).Uid}
		comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		p.comm = strings.TrimSpace(string(comm))
		if st, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
			// After the command's name in parentheses: the state, the parent.
			if _, rest, ok := strings.Cut(string(st), ") "); ok {
				f := strings.Fields(rest)
				if len(f) > 1 {
					p.state = f[0]
					p.ppid, _ = strconv.Atoi(f[1])
				}
			}
		}
		p.cmdline = strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		p.pidNS, _ = os.Readlink(filepath.Join(dir, "ns", "pid"))
		p.netNS, _ = os.Readlink(filepath.Join(dir, "ns", "net"))
		if memory {
			p.rssMB = kbField(filepath.Join(dir, "status"), "VmRSS:")
			p.pssMB = kbField(filepath.Join(dir, "smaps_rollup"), "Pss:")
		}
		out = append(out, p)
	}
	return out
}

// kbField reads the "NAME: N kB" line of a /proc file, in MB.
func kbField(path, name string) float64 {
	b, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return float64(kb) / 1024
		}
	}
	return 0
}

// finishing are the words of the command lines of what a session leaves to
// finish after aisb returned: its watchdog, its status reader, Podman's
// cleanup of an exited container.
var finishing = []string{"internal-watchdog", "internal-read-status", "container cleanup"}

// settleUser waits, at most within, until none of the test user's processes
// is finishing a session (settle, for the test user alone: other users'
// sessions run on the machine too); it reports whether they all ended.
func settleUser(b *testing.B, uid uint32, within time.Duration) bool {
	b.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		busy := false
		for _, p := range processes(false) {
			for _, w := range finishing {
				busy = busy || p.uid == uid && strings.Contains(p.cmdline, w)
			}
		}
		if !busy {
			time.Sleep(100 * time.Millisecond)
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
	}
}

// stock is what the test user has that a session could leave behind.
type stock struct {
	containers []string        // aisb's (labelled), in any state
	volumes    map[string]bool // every volume
	netns      map[string]bool // Podman's network namespaces of the user
	pids       map[int]bool    // the user's processes
	sessions   map[string]bool // session directories
}

func userPaths(u *user) state.Paths {
	p, _ := state.FromEnv(func(k string) string {
		return map[string]string{"XDG_STATE_HOME": u.State, "XDG_CONFIG_HOME": u.Config}[k]
	})
	return p
}

func takeStock(b *testing.B, c engine.Engine, u *user, uid uint32) stock {
	b.Helper()
	ctx := context.Background()
	s := stock{volumes: map[string]bool{}, netns: map[string]bool{}, pids: map[int]bool{}, sessions: map[string]bool{}}
	list, err := c.ContainerList(ctx, map[string][]string{"label": {engine.LabelKind}})
	if err != nil {
		b.Fatalf("list containers: %v", err)
	}
	for _, ct := range list {
		s.containers = append(s.containers, fmt.Sprintf("%s (%s)", strings.Join(ct.Names, ","), ct.State))
	}
	vols, err := c.VolumeList(ctx, nil)
	if err != nil {
		b.Fatalf("list volumes: %v", err)
	}
	for _, v := range vols {
		s.volumes[v.Name] = true
	}
	ents, _ := os.ReadDir(fmt.Sprintf("/run/user/%d/netns", uid))
	for _, e := range ents {
		s.netns[e.Name()] = true
	}
	for _, p := range processes(false) {
		if p.uid == uid {
			s.pids[p.pid] = true
		}
	}
	ents, _ = os.ReadDir(userPaths(u).SessionsDir())
	for _, e := range ents {
		s.sessions[e.Name()] = true
	}
	return s
}

// gateMemory is what the sessions hold while all are up.
type gateMemory struct {
	gates, sandboxes                     int
	rss, pss                             float64 // the gates' processes, in all
	aisbRSS, aisbPSS, pastaRSS, pastaPSS float64 // the sessions' own processes, beside the gates
	conmonRSS                            float64
	namespaces                           map[string]string // the gates' and sandboxes' pid and net namespaces: whose
	unmeasured                           []string          // containers whose processes could not be found
}

// measureGates finds every running gate and sandbox container of the user
// (through the engine's inspect) and sums the resident memory of each
// gate's processes: every process in the gate's pid namespace, squid and its
// helpers. It also records the sandboxes' namespaces, in which nothing may
// be left afterwards.
func measureGates(b *testing.B, c engine.Engine) gateMemory {
	b.Helper()
	ctx := context.Background()
	m := gateMemory{namespaces: map[string]string{}}
	list, err := c.ContainerList(ctx, map[string][]string{"label": {engine.LabelKind}})
	if err != nil {
		b.Fatalf("list containers: %v", err)
	}
	gatePIDNS := map[string]bool{}
	for _, ct := range list {
		kind := ct.Labels[engine.LabelKind]
		if ct.State != "running" || kind != "gate" && kind != "sandbox" {
			continue
		}
		data, err := c.ContainerInspect(ctx, ct.ID)
		if err != nil || data.State == nil || data.State.Pid <= 0 {
			m.unmeasured = append(m.unmeasured, fmt.Sprintf("%s: %v", strings.Join(ct.Names, ","), err))
			continue
		}
		pidNS, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", data.State.Pid))
		netNS, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", data.State.Pid))
		if err1 != nil || err2 != nil {
			m.unmeasured = append(m.unmeasured, fmt.Sprintf("%s: pid %d: %v %v", data.Name, data.State.Pid, err1, err2))
			continue
		}
		m.namespaces[pidNS] = kind + " " + data.Name
		if kind == "gate" {
			m.gates++
			gatePIDNS[pidNS] = true // its network is the host's: not recorded
		} else {
			m.sandboxes++
			m.namespaces[netNS] = kind + " " + data.Name
		}
	}
	uid := testUID(b)
	ids := userIDs(b, uid)
	for _, p := range processes(true) {
		switch {
		case !ids(p.uid):
		case gatePIDNS[p.pidNS]:
			m.rss, m.pss = m.rss+p.rssMB, m.pss+p.pssMB
		case p.uid != uid:
		case strings.HasPrefix(p.comm, "pasta"):
			m.pastaRSS, m.pastaPSS = m.pastaRSS+p.rssMB, m.pastaPSS+p.pssMB
		case p.comm == "conmon":
			m.conmonRSS += p.rssMB
		case strings.Contains(p.cmdline, "internal-podman-service"):
		case strings.Contains(p.cmdline, "aisb run "), strings.Contains(p.cmdline, "internal-watchdog"), strings.Contains(p.cmdline, "internal-read-status"):
			m.aisbRSS, m.aisbPSS = m.aisbRSS+p.rssMB, m.aisbPSS+p.pssMB
		}
	}
	return m
}

// kept are the processes of the user that outlive sessions by design:
// Podman's pause process and aisb's shared Podman service with its keeper
// (stopped a minute after the last aisb), and the benchmark's own service.
var kept = []string{"catatonit", "internal-podman-service", "podman system service"}

// leftovers is everything of the burst's sessions still there: containers,
// volumes and network namespaces that were not there before, processes in
// a gate's or sandbox's namespaces or of the user that did not run before,
// a gate port still listening, a session still marked running or in the
// live registry, a gate's secrets or the ask helper's copy in a session
// directory.
//
// One thing is told apart (wedged): the main thread of a Podman service
// left in a sandbox's network namespace. Podman makes a container's network
// namespace by unshare(2) on a goroutine locked to its thread, never goes
// back and counts on Go to end the thread with the goroutine
// (go.podman.io/common's pkg/netns, v0.67.1); when that thread is the
// process's main thread, Go cannot end it and parks it for good, in that
// namespace. That is Podman's, at most one namespace for a service's life
// (the parked thread never runs again), and it goes with the service
// (aisb's shared one stops a minute after its last session): it is said,
// not counted.
func leftovers(b *testing.B, c engine.Engine, u *user, uid uint32, before stock, m gateMemory) (left, wedged []string) {
	b.Helper()
	after := takeStock(b, c, u, uid)
	for _, ct := range after.containers {
		left = append(left, "container "+ct)
	}
	for v := range after.volumes {
		if !before.volumes[v] {
			left = append(left, "volume "+v)
		}
	}
	for n := range after.netns {
		if !before.netns[n] {
			left = append(left, "network namespace "+n)
		}
	}
	ids := userIDs(b, uid)
	for _, p := range processes(false) {
		// A namespace's inode may be another's once it is gone: only the
		// user's own ids (its uid, its subordinate range) count.
		if !ids(p.uid) {
			continue
		}
		desc := fmt.Sprintf("process %d (%s, state %s, parent %d, uid %d)", p.pid, p.cmdline, p.state, p.ppid, p.uid)
		if p.cmdline == "" {
			desc = fmt.Sprintf("process %d (%s, state %s, parent %d, uid %d)", p.pid, p.comm, p.state, p.ppid, p.uid)
		}
		if p.state == "Z" && p.ppid == 1 {
			// Ended, its resources freed: the machine's init has not
			// yet collected its status (it does so in its own time).
			continue
		}
		if what, ok := m.namespaces[p.pidNS]; ok {
			left = append(left, desc+" in the pid namespace of "+what)
		} else if what, ok := m.namespaces[p.netNS]; ok && wedgedMainThread(p) {
			wedged = append(wedged, fmt.Sprintf("the main thread of Podman's service %d holds the network namespace of %s (nothing else of the service is in it)", p.pid, what))
		} else if ok {
			left = append(left, desc+" in the network namespace of "+what)
		} else if p.uid == uid && !before.pids[p.pid] && !keptProcess(p.cmdline) {
			left = append(left, desc)
		}
	}
	paths := userPaths(u)
	running, err := paths.RunningSessions()
	if err != nil {
		left = append(left, err.Error())
	}
	for _, r := range running {
		left = append(left, "session "+r.ID+" still marked running by "+r.Owner)
	}
	if ents, _ := os.ReadDir(paths.RunningDir()); len(ents) > 0 {
		for _, e := range ents {
			left = append(left, "live registry entry "+e.Name())
		}
	}
	for id := range after.sessions {
		if before.sessions[id] {
			continue
		}
		dir := paths.SessionDir(id)
		var h struct {
			Port    int `json:"port"`
			TLSPort int `json:"tls_port"`
		}
		if b, err := os.ReadFile(filepath.Join(dir, "finish.json")); err != nil || json.Unmarshal(b, &h) != nil || h.Port == 0 {
			left = append(left, "session "+id+": no hand-over to its watchdog recorded (finish.json)")
		}
		for _, port := range []int{h.Port, h.TLSPort} {
			if port > 0 && gate.Listening(port) {
				left = append(left, fmt.Sprintf("session %s: its gate's port %d still listens", id, port))
			}
		}
		for _, p := range append(gate.SecretPaths(filepath.Join(dir, "gate")), filepath.Join(dir, "ask")) {
			if _, err := os.Lstat(p); err == nil {
				left = append(left, "session "+id+": "+p)
			}
		}
	}
	return left, wedged
}

// wedgedMainThread reports whether p is a Podman service of which only the
// main thread is in the network namespace /proc/PID/ns/net shows (that of
// the main thread), every other thread in another one.
func wedgedMainThread(p proc) bool {
	if !strings.Contains(p.cmdline, "podman system service") {
		return false
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.pid))
	others := 0
	for _, t := range tasks {
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/task/%s/ns/net", p.pid, t.Name()))
		if t.Name() == strconv.Itoa(p.pid) {
			if ns != p.netNS {
				return false
			}
			continue
		}
		if ns == p.netNS {
			return false
		}
		others++
	}
	return others > 0
}

func keptProcess(cmdline string) bool {
	for _, k := range kept {
		if strings.Contains(cmdline, k) {
			return true
		}
	}
	return false
}

// userIDs reports whether a host uid is the test user's or one of its
// subordinate ids (/etc/subuid), which its containers' processes run as.
func userIDs(b *testing.B, uid uint32) func(uint32) bool {
	b.Helper()
	name := testhost.User
	data, err := os.ReadFile("/etc/subuid")
	if err != nil {
		b.Fatal(err)
	}
	var start, count uint32
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Split(l, ":")
		if len(f) == 3 && (f[0] == name || f[0] == strconv.Itoa(int(uid))) {
			s, _ := strconv.Atoi(f[1])
			n, _ := strconv.Atoi(f[2])
			start, count = uint32(s), uint32(n)
		}
	}
	if count == 0 {
		b.Fatalf("no subordinate ids of %s in /etc/subuid", name)
	}
	return func(id uint32) bool { return id == uid || id >= start && id < start+count }
}
