package testhost

import (
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Keepers lists the pids of the test user's shared Podman service keepers
// (`aisb internal-podman-service`) whose environment holds env: a whole
// NAME=VALUE, or, when env ends in "=", the variable with any value; ""
// for every keeper of the user.
func Keepers(env string) []int {
	u, err := user.Lookup(User)
	if err != nil {
		return nil
	}
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name()), &st) != nil || strconv.Itoa(int(st.Uid)) != u.Uid {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.Contains(string(cmdline), "internal-podman-service") {
			continue
		}
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if env == "" || slices.ContainsFunc(strings.Split(string(environ), "\x00"), func(kv string) bool {
			return kv == env || strings.HasSuffix(env, "=") && strings.HasPrefix(kv, env)
		}) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ChildPids lists pid's children, of any of its threads (Go forks from
// whichever runs).
func ChildPids(pid int) []int {
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	var out []int
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
