package engine

import "syscall"

// diesWithParent has the kernel send the child SIGTERM when the thread that
// started it ends (the parent-death signal).
func diesWithParent(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	a.Pdeathsig = syscall.SIGTERM
	return a
}
