//go:build !linux

package engine

import "syscall"

// diesWithParent has no parent-death signal to set outside Linux: a private
// podman service there outlives a killed aisb (Close still stops it).
func diesWithParent(a *syscall.SysProcAttr) *syscall.SysProcAttr { return a }
