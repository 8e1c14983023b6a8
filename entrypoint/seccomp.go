package entrypoint

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The entrypoint's own seccomp filter, stacked on whatever the runtime
// installed (Podman's default profile allows socket(2) for every family but
// netlink-audit, so AF_VSOCK, AF_XDP and others would be open to the agent,
// and the table, which sees IP only, does not cover them). It depends on no
// runtime profile: with seccomp=unconfined it is the only filter and still
// holds. Decisions, in this order:
//
//   - a system call made under another ABI than the entrypoint's own (i386
//     through int 0x80, x32 on amd64) kills the process: i386 reaches sockets
//     through socketcall(2), whose arguments are in memory where a filter
//     cannot read them;
//   - socket(2) and socketpair(2) succeed only for AF_UNIX, AF_INET, AF_INET6
//     and AF_NETLINK; any other family fails with EAFNOSUPPORT, the kernel's
//     own answer for a family it lacks, so programs take their usual fallback;
//   - io_uring_setup, io_uring_enter and io_uring_register fail with ENOSYS,
//     the kernel's answer when io_uring is not built in: IORING_OP_SOCKET
//     opens sockets without socket(2), out of this filter's sight, and
//     libraries (libuv, liburing) fall back to plain system calls on ENOSYS;
//   - everything else is allowed (the runtime's own filter still applies).

// allowedFamilies are the socket families the agent may open.
var allowedFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// x32SyscallBit marks an x32 system call on amd64.
const x32SyscallBit = 0x40000000

// Offsets into struct seccomp_data: nr (int), arch (u32), ip (u64), args[6]
// (u64). The architectures below are little-endian, so the low 32 bits of
// args[0] (the family, an int) are at offset 16.
const (
	offNr    = 0
	offArch  = 4
	offArg0  = 16
	retKill  = unix.SECCOMP_RET_KILL_PROCESS
	retAllow = unix.SECCOMP_RET_ALLOW
)

func retErrno(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA }

// ErrArchUnsupported: the filter knows no audit architecture for this build.
var ErrArchUnsupported = errors.New("no seccomp filter for this architecture")

// sysArch is what the filter needs to know of one architecture: its
// AUDIT_ARCH and system call numbers (written out, not taken from x/sys, so
// that a test on one machine checks every architecture's program; another
// test checks them against x/sys for the build's own).
type sysArch struct {
	audit                  uint32
	socket, socketpair     uint32
	uringSetup, uringEnter uint32
	uringRegister          uint32
	x32                    bool // amd64: x32 calls share the AUDIT_ARCH, bit 30 set
}

var sysArchs = map[string]sysArch{
	"amd64": {audit: unix.AUDIT_ARCH_X86_64, socket: 41, socketpair: 53, uringSetup: 425, uringEnter: 426, uringRegister: 427, x32: true},
	"arm64": {audit: unix.AUDIT_ARCH_AARCH64, socket: 198, socketpair: 199, uringSetup: 425, uringEnter: 426, uringRegister: 427},
}

// socketFilter builds the classic BPF program described at the top of this
// file. Jumps are relative and counted by hand; the program is short enough
// to read top to bottom.
func socketFilter(goarch string) ([]unix.SockFilter, error) {
	a, ok := sysArchs[goarch]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrArchUnsupported, goarch)
	}
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: jt, Jf: jf, K: k}
	}
	ld := func(off uint32) unix.SockFilter { return stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }
	ret := func(k uint32) unix.SockFilter { return stmt(unix.BPF_RET|unix.BPF_K, k) }

	// 1. A foreign architecture dies.
	p := []unix.SockFilter{
		ld(offArch),
		jeq(a.audit, 1, 0),
		ret(retKill),
		ld(offNr),
	}
	if a.x32 {
		// x32 system calls carry the same AUDIT_ARCH with bit 30 set.
		p = append(p,
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: 0, Jf: 1, K: x32SyscallBit},
			ret(retKill))
	}
	// 2. Dispatch on the system call number; each jump counts the
	//    instructions it skips to reach the block named in its comment.
	p = append(p,
		jeq(a.socket, 5, 0),        // -> family check
		jeq(a.socketpair, 4, 0),    // -> family check
		jeq(a.uringSetup, 10, 0),   // -> ENOSYS
		jeq(a.uringEnter, 9, 0),    // -> ENOSYS
		jeq(a.uringRegister, 8, 0), // -> ENOSYS
		ret(retAllow),
		// 3. The family: args[0] of socket and socketpair.
		ld(offArg0),
		jeq(allowedFamilies[0], 4, 0), // -> allow
		jeq(allowedFamilies[1], 3, 0),
		jeq(allowedFamilies[2], 2, 0),
		jeq(allowedFamilies[3], 1, 0),
		ret(retErrno(unix.EAFNOSUPPORT)),
		ret(retAllow),
		// 4. io_uring.
		ret(retErrno(unix.ENOSYS)),
	)
	return p, nil
}

// restrictSockets installs the filter on the calling thread, which must be
// the locked thread that execs the command and must have no_new_privs set,
// then checks in /proc/thread-self/status that the kernel holds one more
// filter than before.
func restrictSockets() error {
	prog, err := socketFilter(runtime.GOARCH)
	if err != nil {
		return err
	}
	before, err := seccompFilters()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	runtime.KeepAlive(prog)
	after, err := seccompFilters()
	if err != nil {
		return err
	}
	if after != before+1 {
		return fmt.Errorf("verify seccomp filter: the thread holds %d filters, want %d", after, before+1)
	}
	return nil
}

// seccompFilters reads this thread's Seccomp_filters count; it also checks
// that the mode is filter (2) once a filter is in place.
func seccompFilters() (int, error) {
	f, err := os.Open("/proc/thread-self/status")
	if err != nil {
		return 0, fmt.Errorf("read seccomp state: %w", err)
	}
	defer f.Close()
	mode, n := "", -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		switch k {
		case "Seccomp":
			mode = strings.TrimSpace(v)
		case "Seccomp_filters":
			if n, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return 0, fmt.Errorf("read seccomp state: Seccomp_filters %q", v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read seccomp state: %w", err)
	}
	if n < 0 {
		return 0, errors.New("read seccomp state: no Seccomp_filters in /proc/thread-self/status")
	}
	if n > 0 && mode != "2" {
		return 0, fmt.Errorf("read seccomp state: %d filters but mode %q", n, mode)
	}
	return n, nil
}

// restrictSocketsAllThreads installs the same filter on every thread of
// the process at once (SECCOMP_FILTER_FLAG_TSYNC): the relay serves from
// many threads. The calling thread needs no_new_privs; the kernel sets it
// on the others with the filter.
func restrictSocketsAllThreads() error {
	prog, err := socketFilter(runtime.GOARCH)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("install seccomp filter on every thread: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("install seccomp filter on every thread: thread %d could not take it", r)
	}
	n, err := seccompFilters()
	if err != nil {
		return err
	}
	if n < 1 {
		return errors.New("verify seccomp filter: none on this thread")
	}
	return nil
}
