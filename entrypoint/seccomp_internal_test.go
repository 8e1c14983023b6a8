package entrypoint

import (
	"errors"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// run interprets the subset of classic BPF the filter uses, over a
// seccomp_data of (nr, arch, args[0]), so that the arm64 program, which this
// machine cannot load, is checked too. The kernel test (seccomp_test.go)
// proves the amd64 program where it counts.
func run(t *testing.T, prog []unix.SockFilter, nr int32, arch uint32, arg0 uint32) uint32 {
	t.Helper()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			switch in.K {
			case offNr:
				a = uint32(nr)
			case offArch:
				a = arch
			case offArg0:
				a = arg0
			default:
				t.Fatalf("pc %d: load of offset %d", pc, in.K)
			}
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if a == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			if a&in.K != 0 {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("pc %d: unexpected instruction %#x", pc, in.Code)
		}
	}
	t.Fatal("the program ran off its end")
	return 0
}

func TestSocketFilterProgram(t *testing.T) {
	for _, c := range []struct {
		goarch                         string
		arch                           uint32
		socket, socketpair, uringSetup int32
	}{
		{"amd64", unix.AUDIT_ARCH_X86_64, 41, 53, 425},
		{"arm64", unix.AUDIT_ARCH_AARCH64, 198, 199, 425},
	} {
		t.Run(c.goarch, func(t *testing.T) {
			prog, err := socketFilter(c.goarch)
			if err != nil {
				t.Fatal(err)
			}
			eafnosupport, enosys := retErrno(unix.EAFNOSUPPORT), retErrno(unix.ENOSYS)
			for _, f := range []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK} {
				for _, nr := range []int32{c.socket, c.socketpair} {
					if got := run(t, prog, nr, c.arch, f); got != retAllow {
						t.Errorf("syscall %d family %d: %#x, want allow", nr, f, got)
					}
				}
			}
			for _, f := range []uint32{0, unix.AF_PACKET, unix.AF_VSOCK, unix.AF_XDP, unix.AF_ALG, unix.AF_KEY, unix.AF_BLUETOOTH, unix.AF_MAX, 1 << 31} {
				for _, nr := range []int32{c.socket, c.socketpair} {
					if got := run(t, prog, nr, c.arch, f); got != eafnosupport {
						t.Errorf("syscall %d family %d: %#x, want EAFNOSUPPORT", nr, f, got)
					}
				}
			}
			for _, nr := range []int32{c.uringSetup, c.uringSetup + 1, c.uringSetup + 2} {
				if got := run(t, prog, nr, c.arch, 0); got != enosys {
					t.Errorf("io_uring syscall %d: %#x, want ENOSYS", nr, got)
				}
			}
			if got := run(t, prog, 0, c.arch, unix.AF_VSOCK); got != retAllow {
				t.Errorf("read: %#x, want allow", got)
			}
			if got := run(t, prog, c.socket, unix.AUDIT_ARCH_I386, unix.AF_INET); got != retKill {
				t.Errorf("i386 socket: %#x, want kill", got)
			}
			if got := run(t, prog, c.socket|x32SyscallBit, c.arch, unix.AF_INET); c.goarch == "amd64" && got != retKill {
				t.Errorf("x32 socket: %#x, want kill", got)
			}
		})
	}
	// The written-out numbers are x/sys's for the build's own architecture.
	a := sysArchs[runtime.GOARCH]
	if a.socket != unix.SYS_SOCKET || a.socketpair != unix.SYS_SOCKETPAIR || a.uringSetup != unix.SYS_IO_URING_SETUP ||
		a.uringEnter != unix.SYS_IO_URING_ENTER || a.uringRegister != unix.SYS_IO_URING_REGISTER {
		t.Errorf("%s: system call numbers differ from x/sys: %+v", runtime.GOARCH, a)
	}
	if _, err := socketFilter("riscv64"); !errors.Is(err, ErrArchUnsupported) {
		t.Errorf("riscv64: %v, want ErrArchUnsupported", err)
	}
}
