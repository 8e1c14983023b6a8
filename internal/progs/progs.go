// Package progs finds the programs aisb puts into the engine's containers
// (the sandbox's entrypoint, the gate's helper) built for the engine's
// architecture, which need not be the CLI's: on a Mac the CLI is
// darwin/arm64 and the engine a linux/arm64 VM. Each must be a static
// Linux ELF for that machine; a found one that is not is refused by name.
package progs

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// The programs, by their file names.
const (
	Entrypoint = "aisb-entrypoint"
	GateHelper = "aisb-gatehelper"
)

// machines are the architectures aisb builds its programs for (make's
// bin/linux-ARCH/), as GOARCH names them, with their ELF machine.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// Sentinel errors of Find and Check, matched with errors.Is.
var (
	ErrUnknownArch = errors.New("no aisb programs are built for this architecture")
	ErrNotFound    = errors.New("not found")
	ErrWrongArch   = errors.New("built for another machine")
	ErrDynamic     = errors.New("dynamically linked")
)

// Find returns the path of program (Entrypoint or GateHelper) for a Linux
// engine of arch: override when set ($AISB_ENTRYPOINT, $AISB_GATEHELPER),
// else the first that exists of, beside the running aisb in dir:
//
//	dir/program             (make's and go install's own, when the engine is this host's kind)
//	dir/linux-ARCH/program  (make's bin/linux-ARCH/ beside bin/aisb)
//	dir/linux_ARCH/program  (go install's for a GOOS/GOARCH not the host's)
//	dir/../linux-ARCH/program (make's, beside bin/darwin-arm64/aisb)
//
// Whichever is found is checked (Check): a static ELF for arch, else an
// error saying so, never the next candidate.
func Find(program, arch, override string) (string, error) {
	if _, ok := machines[arch]; !ok {
		return "", fmt.Errorf("find %s for linux/%s: %w (only %s); set $%s to one built for it", program, arch, ErrUnknownArch, known(), envOf(program))
	}
	if override != "" {
		return override, Check(override, arch)
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find %s: %w", program, err)
	}
	return findIn(filepath.Dir(self), program, arch)
}

func findIn(dir, program, arch string) (string, error) {
	cands := candidates(dir, program, arch)
	for _, p := range cands {
		if _, err := os.Stat(p); err == nil {
			return p, Check(p, arch)
		}
	}
	return "", fmt.Errorf("find %s for linux/%s (the engine's): %w at %s; build them with make (bin/linux-%s/), or set $%s",
		program, arch, ErrNotFound, strings.Join(cands, ", "), arch, envOf(program))
}

// candidates are Find's places, in order.
func candidates(dir, program, arch string) []string {
	var c []string
	if runtime.GOOS == "linux" && runtime.GOARCH == arch {
		c = append(c, filepath.Join(dir, program))
	}
	return append(c,
		filepath.Join(dir, "linux-"+arch, program),
		filepath.Join(dir, "linux_"+arch, program),
		filepath.Join(filepath.Dir(dir), "linux-"+arch, program))
}

// Check says whether the file at p is a static 64-bit Linux ELF for arch:
// it runs first in any image, and in the engine's kernel.
func Check(p, arch string) error {
	name := filepath.Base(p)
	want, ok := machines[arch]
	if !ok {
		return fmt.Errorf("%s at %s: %w: linux/%s (only %s)", name, p, ErrUnknownArch, arch, known())
	}
	f, err := elf.Open(p)
	var ferr *elf.FormatError
	if errors.As(err, &ferr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s at %s: %w: not a Linux program (%v); build it with GOOS=linux GOARCH=%s", name, p, ErrWrongArch, err, arch)
	}
	if err != nil {
		return fmt.Errorf("%s at %s: %w", name, p, err)
	}
	defer f.Close()
	if f.Machine != want || f.Class != elf.ELFCLASS64 {
		return fmt.Errorf("%s at %s: %w (%s, %s), not for the engine's linux/%s; build it with GOOS=linux GOARCH=%s (make puts it in bin/linux-%s/)",
			name, p, ErrWrongArch, f.Machine, f.Class, arch, arch, arch)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s at %s: %w; build it with CGO_ENABLED=0", name, p, ErrDynamic)
		}
	}
	return nil
}

func known() string { return "amd64 and arm64" }

func envOf(program string) string {
	if program == GateHelper {
		return "AISB_GATEHELPER"
	}
	return "AISB_ENTRYPOINT"
}
