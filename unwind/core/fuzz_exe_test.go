package core_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/prologue"
	"github.com/unwindkit/unwindkit/unwind/core"
)

// patchExe applies a patch list to a copy of exe: records of a 4-byte
// little-endian offset (modulo the file's size), a length byte (1 to 16
// bytes) and the bytes, at most 32 records; a short tail is ignored. So
// an input stays a few dozen bytes while the executable is a real one.
func patchExe(exe, patches []byte) []byte {
	out := bytes.Clone(exe)
	for k := 0; k < 32 && len(patches) >= 5; k++ {
		off := int(binary.LittleEndian.Uint32(patches) % uint32(len(out)))
		n := int(patches[4]%16) + 1
		patches = patches[5:]
		n = min(n, len(patches))
		copy(out[off:], patches[:n])
		patches = patches[n:]
	}
	return out
}

func patch(off uint64, b ...byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(off)), append([]byte{byte(len(b) - 1)}, b...)...)
}

// FuzzHostileExecutable loads a committed core (gcc-pie, qsort) with its
// executable changed by a patch list, and unwinds and compares every
// thread; the same executable goes through the prologue scanner. A
// hostile executable is a warning, never a failed Load, a panic, a hang
// or a balloon; the scanner's errors name the file.
func FuzzHostileExecutable(f *testing.F) {
	coreBytes := gunzip(f, dir+"/cores/gcc-pie-pauth-qsort.core.gz")
	exe := gunzip(f, dir+"/bin/gcc-pie.elf.gz")
	ef, err := elf.NewFile(bytes.NewReader(exe))
	if err != nil {
		f.Fatal(err)
	}
	shoff := binary.LittleEndian.Uint64(exe[0x28:])
	f.Add([]byte{})
	for i, s := range ef.Sections {
		sh := shoff + 64*uint64(i)
		switch s.Type {
		case elf.SHT_SYMTAB, elf.SHT_DYNSYM, elf.SHT_STRTAB:
			f.Add(patch(sh+9, byte(elf.SHF_COMPRESSED>>8))) // sh_flags: SHF_COMPRESSED
			f.Add(patch(sh+32, 0xff, 0xff, 0xff))           // sh_size
			f.Add(patch(sh+40, 0x7f))                       // sh_link
		}
		if s.Name == ".strtab" || s.Name == ".dynstr" {
			f.Add(append(patch(s.Offset, 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x'), patch(s.Offset+8, 'y', 'y', 'y', 'y')...))
		}
		if s.Type == elf.SHT_SYMTAB {
			// Every symbol's size 1 GiB: overlapping functions.
			var p []byte
			for k := uint64(1); k < 30 && 24*k < s.Size; k++ {
				p = append(p, patch(s.Offset+24*k+16, 0, 0, 0, 0x40)...)
			}
			f.Add(p)
		}
	}
	f.Add(patch(0x3c, 0, 0))       // e_shnum 0
	f.Add(patch(0x3e, 0xff, 0xff)) // e_shstrndx SHN_XINDEX
	f.Fuzz(func(t *testing.T, patches []byte) {
		data := patchExe(exe, patches)
		co, err := core.Load("qsort.core", bytes.NewReader(coreBytes), int64(len(coreBytes)), core.ObjectFile{Path: "gcc-pie.elf", Data: data})
		if err != nil {
			t.Fatalf("a hostile executable failed the load: %v", err)
		}
		for i := range co.Threads {
			co.Compare(&co.Threads[i])
			co.X30Only(&co.Threads[i])
		}
		if _, err := prologue.NewReader("fuzz.elf", bytes.NewReader(data), int64(len(data))); err != nil && !strings.Contains(err.Error(), "fuzz.elf") {
			t.Fatalf("scanner error does not name the file: %v", err)
		}
	})
}
