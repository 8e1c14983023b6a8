package progs

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// Header is, for tests, the start of a 64-bit little-endian Linux
// executable for arch's ELF machine ("riscv64" for one aisb builds
// nothing for) with one program header: PT_LOAD, a static program's, or
// with dynamic PT_INTERP. Check reads no more of a file than that; a test
// that cross-built a real one would first compile Go's runtime for that
// architecture (tens of seconds from a cold cache).
func Header(arch string, dynamic bool) ([]byte, error) {
	m, ok := machines[arch]
	if !ok && arch != "riscv64" {
		return nil, fmt.Errorf("header for %s: %w", arch, ErrUnknownArch)
	}
	if !ok {
		m = elf.EM_RISCV
	}
	var b bytes.Buffer
	b.Write([]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT), byte(elf.ELFOSABI_NONE)})
	b.Write(make([]byte, 8))
	typ := elf.PT_LOAD
	if dynamic {
		typ = elf.PT_INTERP
	}
	for _, v := range []any{
		// The file header: type, machine, version, entry, phoff, shoff,
		// flags, ehsize, phentsize, phnum, shentsize, shnum, shstrndx.
		uint16(elf.ET_EXEC), uint16(m), uint32(elf.EV_CURRENT), uint64(0x401000), uint64(64), uint64(0), uint32(0),
		uint16(64), uint16(56), uint16(1), uint16(64), uint16(0), uint16(0),
		// The program header: type, flags, offset, vaddr, paddr, filesz,
		// memsz, align.
		uint32(typ), uint32(elf.PF_R | elf.PF_X), uint64(0), uint64(0x400000), uint64(0x400000), uint64(120), uint64(120), uint64(0x1000),
	} {
		binary.Write(&b, binary.LittleEndian, v)
	}
	return b.Bytes(), nil
}
