package progs

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// crossBuild writes dir/name, a Linux executable's header for arch
// (Header).
func crossBuild(t *testing.T, dir, name, arch string, dynamic ...bool) string {
	t.Helper()
	b, err := Header(arch, len(dynamic) > 0 && dynamic[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	if err := os.WriteFile(out, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// other is an architecture aisb builds for that is not this host's.
func other() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// TestCheckRefusesWrongArch: a real static ELF of the other machine is
// refused for this one and accepted for its own (the control); so is this
// machine's for its own.
func TestCheckRefusesWrongArch(t *testing.T) {
	dir := t.TempDir()
	arm := crossBuild(t, filepath.Join(dir, "arm"), Entrypoint, "arm64")
	amd := crossBuild(t, filepath.Join(dir, "amd"), Entrypoint, "amd64")
	for _, c := range []struct {
		path, arch string
		want       error
	}{
		{arm, "arm64", nil}, {amd, "amd64", nil},
		{arm, "amd64", ErrWrongArch}, {amd, "arm64", ErrWrongArch},
		{amd, "riscv64", ErrUnknownArch},
	} {
		err := Check(c.path, c.arch)
		if !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Errorf("Check(%s, %s) = %v, want %v", c.path, c.arch, err, c.want)
		}
		if c.want == ErrWrongArch && (err == nil || !strings.Contains(err.Error(), "GOARCH="+c.arch)) {
			t.Errorf("Check(%s, %s): %v does not say how to build the right one", c.path, c.arch, err)
		}
	}
	// A dynamically linked one, and not an ELF at all.
	dyn := crossBuild(t, filepath.Join(dir, "dyn"), Entrypoint, "arm64", true)
	if err := Check(dyn, "arm64"); !errors.Is(err, ErrDynamic) {
		t.Errorf("Check(dynamic) = %v, want %v", err, ErrDynamic)
	}
	script := filepath.Join(dir, "script")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	if err := Check(script, runtime.GOARCH); !errors.Is(err, ErrWrongArch) {
		t.Errorf("Check(shell script) = %v, want %v", err, ErrWrongArch)
	}
}

// TestCheckReadsRealBuilds: the header crossBuild writes is what Go's
// linker writes, for this host's machine (the test binary itself, a static
// build under make) and the control: the other machine's is refused.
func TestCheckReadsRealBuilds(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "linux" {
		t.Skip("the test binary is not a Linux ELF here")
	}
	if err := Check(self, runtime.GOARCH); err != nil && !errors.Is(err, ErrDynamic) {
		t.Errorf("Check(test binary, %s) = %v", runtime.GOARCH, err)
	}
	if err := Check(self, other()); !errors.Is(err, ErrWrongArch) {
		t.Errorf("Check(test binary, %s) = %v, want %v", other(), err, ErrWrongArch)
	}
}

// TestFindPicksByEngineArch: beside a CLI in bin/darwin-arm64/ or bin/,
// the programs of bin/linux-ARCH/ for the engine's ARCH are found, not the
// other machine's; a wrong-arch program in the engine's place is refused
// rather than passed over; none at all names the places and the fix.
func TestFindPicksByEngineArch(t *testing.T) {
	bin := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		crossBuild(t, filepath.Join(bin, "linux-"+arch), Entrypoint, arch)
	}
	for _, cli := range []string{filepath.Join(bin, "darwin-arm64"), bin} {
		for _, arch := range []string{"amd64", "arm64"} {
			p, err := findIn(cli, Entrypoint, arch)
			if err != nil {
				t.Fatalf("CLI in %s, engine linux/%s: %v", cli, arch, err)
			}
			if want := filepath.Join(bin, "linux-"+arch, Entrypoint); p != want {
				t.Errorf("CLI in %s, engine linux/%s: found %s, want %s", cli, arch, p, want)
			}
		}
	}
	// The host's own beside bin/aisb wins for a local engine (make's
	// bin/aisb-entrypoint); it is not taken for the other machine.
	own := crossBuild(t, bin, Entrypoint, runtime.GOARCH)
	if runtime.GOOS == "linux" {
		if p, err := findIn(bin, Entrypoint, runtime.GOARCH); err != nil || p != own {
			t.Errorf("local engine: found %s, %v; want %s", p, err, own)
		}
	}
	if p, err := findIn(bin, Entrypoint, other()); err != nil || p != filepath.Join(bin, "linux-"+other(), Entrypoint) {
		t.Errorf("engine linux/%s: found %s, %v", other(), p, err)
	}
	// A program of the wrong machine where the engine's should be.
	mixed := t.TempDir()
	crossBuild(t, filepath.Join(mixed, "linux-"+other()), GateHelper, runtime.GOARCH)
	if _, err := findIn(mixed, GateHelper, other()); !errors.Is(err, ErrWrongArch) {
		t.Errorf("a wrong-arch helper was not refused: %v", err)
	}
	// None: the error names where it looked and the fix.
	_, err := findIn(t.TempDir(), GateHelper, "arm64")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "linux-arm64") || !strings.Contains(err.Error(), "AISB_GATEHELPER") {
		t.Errorf("none found: %v", err)
	}
	// An override is checked like a found one.
	if _, err := Find(Entrypoint, other(), own); !errors.Is(err, ErrWrongArch) {
		t.Errorf("a wrong-arch override was not refused: %v", err)
	}
	if _, err := Find(Entrypoint, "s390x", own); !errors.Is(err, ErrUnknownArch) {
		t.Errorf("an unknown engine architecture was not refused: %v", err)
	}
}
