package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCrosscheckFindsLinuxOnlyCode: a module whose one package sets a
// Linux-only field (the parent-death signal) is refused for darwin/arm64
// with the compiler's words, at that line; the control, the same package
// for linux/arm64, passes, as does its build-tagged fix for darwin.
func TestCrosscheckFindsLinuxOnlyCode(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.test/m\n\ngo 1.24\n")
	write("p.go", "package p\n\nimport \"syscall\"\n\nvar A = syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}\n")
	t.Chdir(dir)
	t.Setenv("GOFLAGS", "")
	t.Setenv("CGO_ENABLED", "0")
	run := func(goos string) []string {
		t.Helper()
		t.Setenv("GOOS", goos)
		t.Setenv("GOARCH", "arm64")
		pkgs, err := list("", true, []string{"./..."})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		check(pkgs, &out)
		return strings.Fields(out.String())
	}
	if errs := run("darwin"); len(errs) == 0 || !strings.Contains(strings.Join(errs, " "), "p.go:5:") || !strings.Contains(strings.Join(errs, " "), "Pdeathsig") {
		t.Errorf("darwin/arm64: %q, want the unknown field Pdeathsig at p.go:5", errs)
	}
	if errs := run("linux"); len(errs) != 0 {
		t.Errorf("linux/arm64 (the control): %q", errs)
	}
	// The fix: the Linux line behind a build tag, a fallback elsewhere.
	os.Rename(filepath.Join(dir, "p.go"), filepath.Join(dir, "p_linux.go"))
	write("p_other.go", "//go:build !linux\n\npackage p\n\nimport \"syscall\"\n\nvar A = syscall.SysProcAttr{}\n")
	if errs := run("darwin"); len(errs) != 0 {
		t.Errorf("darwin/arm64 with the fallback: %q", errs)
	}
}
