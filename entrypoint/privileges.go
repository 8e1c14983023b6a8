package entrypoint

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// dropPrivileges is the pure-Go equivalent of
//
//	setpriv --reuid=UID --regid=GID --clear-groups --inh-caps=-all \
//	        --bounding-set=-all --no-new-privs
//
// It must run on the locked thread that will execve: the bounding set, the
// ambient and inheritable sets and no_new_privs are per thread. setgroups,
// setresgid and setresuid go through Go's syscall package, which applies them
// to every thread of the process.
func dropPrivileges(uid, gid int) error {
	// 1. Empty the bounding set (needs CAP_SETPCAP, so before the uid change).
	if err := dropBounding(); err != nil {
		return err
	}
	// 2. Empty the ambient set.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear the ambient set: %w", err)
	}
	// 3. No supplementary groups, then the group, then the user. Leaving
	//    uid 0 clears the permitted and effective sets.
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("clear groups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("setresgid %d: %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setresuid %d: %w", uid, err)
	}
	// 4. Leaving uid 0 does not clear the inheritable set: set all to zero.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear capability sets: %w", err)
	}
	// 5. Nothing exec'd from here on can gain privileges (setuid, file caps).
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read the last capability: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > 63 {
		return 0, fmt.Errorf("read the last capability: %q", b)
	}
	return n, nil
}

// verifyPrivileges reads this thread's status back from the kernel: every
// capability set empty, no_new_privs on, all ids the agent's, no groups.
func verifyPrivileges(uid, gid int) error { return checkPrivileges(uid, gid, "") }

// checkPrivileges is verifyPrivileges with the supplementary groups the
// kernel must show: "" (none) or, in a pod, where the runtime gives the
// agent its own group as the one supplementary group, that group.
func checkPrivileges(uid, gid int, groups string) error {
	f, err := os.Open("/proc/thread-self/status")
	if err != nil {
		return err
	}
	defer f.Close()
	// Uid and Gid lines hold the real, effective, saved and filesystem ids.
	ids := func(n int) string { return fmt.Sprintf("%d\t%d\t%d\t%d", n, n, n, n) }
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Uid": ids(uid), "Gid": ids(gid), "Groups": groups,
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if w, check := want[k]; ok && check {
			seen[k] = true
			if got := strings.TrimSpace(v); got != w {
				return fmt.Errorf("%s is %q, want %q", k, got, w)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for k := range want {
		if !seen[k] {
			return fmt.Errorf("%s missing from /proc/thread-self/status", k)
		}
	}
	return nil
}
