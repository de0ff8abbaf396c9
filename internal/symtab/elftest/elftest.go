// Package elftest builds small arm64 ELF executables for tests, hostile
// ones included: symbol tables whose names share one long string,
// sections that are SHF_COMPRESSED with any ch_size, overlapping function
// symbols.
package elftest

import (
	"bytes"
	"compress/flate"
	"debug/elf"
	"encoding/binary"
)

var le = binary.LittleEndian

// Section is a section to write after the null section. Its index is its
// place in the list plus 1.
type Section struct {
	Name  string
	Type  elf.SectionType
	Flags elf.SectionFlag
	Addr  uint64
	Link  uint32
	Data  []byte
	// Compressed: Data are written as they are (a zlib stream, see
	// ZlibZeros) behind an Elf64_Chdr of type ELFCOMPRESS_ZLIB whose
	// ch_size is ChSize, and the section is SHF_COMPRESSED.
	Compressed bool
	ChSize     uint64
}

// Build returns an ET_EXEC EM_AARCH64 ELF64 file with the sections, a
// .shstrtab last, and one PT_LOAD (R+X) for each SHF_ALLOC section.
func Build(secs []Section) []byte {
	var shstr []byte
	shstr = append(shstr, 0)
	nameOff := make([]uint32, len(secs)+1)
	for i, s := range secs {
		nameOff[i] = uint32(len(shstr))
		shstr = append(append(shstr, s.Name...), 0)
	}
	nameOff[len(secs)] = uint32(len(shstr))
	shstr = append(shstr, ".shstrtab\x00"...)
	all := append(append([]Section(nil), secs...), Section{Name: ".shstrtab", Type: elf.SHT_STRTAB, Data: shstr})

	var nload int
	for _, s := range all {
		if s.Flags&elf.SHF_ALLOC != 0 {
			nload++
		}
	}
	const ehdr, phdr, shdr = 64, 56, 64
	off := uint64(ehdr + phdr*nload)
	body := make([]byte, off)
	type placed struct{ off, size uint64 }
	at := make([]placed, len(all))
	for i, s := range all {
		for len(body)%8 != 0 {
			body = append(body, 0)
		}
		start := uint64(len(body))
		if s.Compressed {
			body = le.AppendUint32(body, uint32(elf.COMPRESS_ZLIB))
			body = le.AppendUint32(body, 0)
			body = le.AppendUint64(body, s.ChSize)
			body = le.AppendUint64(body, 1)
		}
		body = append(body, s.Data...)
		at[i] = placed{start, uint64(len(body)) - start}
	}
	for len(body)%8 != 0 {
		body = append(body, 0)
	}
	shoff := uint64(len(body))
	h := body[:ehdr]
	copy(h, "\x7fELF\x02\x01\x01")
	le.PutUint16(h[16:], uint16(elf.ET_EXEC))
	le.PutUint16(h[18:], uint16(elf.EM_AARCH64))
	le.PutUint32(h[20:], 1)
	for _, s := range all {
		if s.Flags&elf.SHF_EXECINSTR != 0 {
			le.PutUint64(h[24:], s.Addr) // e_entry
			break
		}
	}
	le.PutUint64(h[32:], ehdr)
	le.PutUint64(h[40:], shoff)
	le.PutUint16(h[52:], ehdr)
	le.PutUint16(h[54:], phdr)
	le.PutUint16(h[56:], uint16(nload))
	le.PutUint16(h[58:], shdr)
	le.PutUint16(h[60:], uint16(len(all)+1))
	le.PutUint16(h[62:], uint16(len(all)))
	p := body[ehdr:ehdr]
	for i, s := range all {
		if s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		p = le.AppendUint32(p, uint32(elf.PT_LOAD))
		p = le.AppendUint32(p, uint32(elf.PF_R|elf.PF_X))
		p = le.AppendUint64(p, at[i].off)
		p = le.AppendUint64(p, s.Addr)
		p = le.AppendUint64(p, s.Addr)
		p = le.AppendUint64(p, at[i].size)
		p = le.AppendUint64(p, at[i].size)
		p = le.AppendUint64(p, 0x1000)
	}
	out := append(body, make([]byte, shdr)...) // the null section
	for i, s := range all {
		fl := s.Flags
		if s.Compressed {
			fl |= elf.SHF_COMPRESSED
		}
		var entsize uint64
		if s.Type == elf.SHT_SYMTAB || s.Type == elf.SHT_DYNSYM {
			entsize = 24
		}
		out = le.AppendUint32(out, nameOff[i])
		out = le.AppendUint32(out, uint32(s.Type))
		out = le.AppendUint64(out, uint64(fl))
		out = le.AppendUint64(out, s.Addr)
		out = le.AppendUint64(out, at[i].off)
		out = le.AppendUint64(out, at[i].size)
		out = le.AppendUint32(out, s.Link)
		out = le.AppendUint32(out, 0)
		out = le.AppendUint64(out, 8)
		out = le.AppendUint64(out, entsize)
	}
	return out
}

// Sym encodes one Elf64_Sym.
func Sym(name uint32, info byte, shndx uint16, value, size uint64) []byte {
	b := le.AppendUint32(nil, name)
	b = append(b, info, 0)
	b = le.AppendUint16(b, shndx)
	b = le.AppendUint64(b, value)
	return le.AppendUint64(b, size)
}

// Func is STT_FUNC with STB_GLOBAL binding, for Sym.
const Func = byte(elf.STB_GLOBAL)<<4 | byte(elf.STT_FUNC)

// Exec returns a file whose .text (section 1, at addr) holds code and
// whose .symtab (section 2) holds the null symbol and syms (Elf64_Sym
// entries from Sym) with the string table strtab (section 3).
func Exec(addr uint64, code, syms, strtab []byte) []byte {
	return Build(Sections(addr, code, syms, strtab))
}

// Sections returns Exec's sections, for a caller to change before Build.
func Sections(addr uint64, code, syms, strtab []byte) []Section {
	return []Section{
		{Name: ".text", Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, Addr: addr, Data: code},
		{Name: ".symtab", Type: elf.SHT_SYMTAB, Link: 3, Data: append(make([]byte, 24), syms...)},
		{Name: ".strtab", Type: elf.SHT_STRTAB, Data: strtab},
	}
}

// ZlibZeros returns a zlib stream of n MiB of zeros (about 1 KiB a MiB)
// without compressing n MiB: one deflated MiB, flushed to a byte
// boundary, is repeated (its blocks refer to nothing before them).
func ZlibZeros(n int) []byte {
	var chunk bytes.Buffer
	w, _ := flate.NewWriter(&chunk, flate.BestCompression)
	w.Write(make([]byte, 1<<20))
	w.Flush()
	out := []byte{0x78, 0xda}
	for range n {
		out = append(out, chunk.Bytes()...)
	}
	var end bytes.Buffer
	w2, _ := flate.NewWriter(&end, flate.BestCompression)
	w2.Close() // a final empty block
	out = append(out, end.Bytes()...)
	// Adler-32 of zeros: A stays 1, B adds 1 a byte.
	return binary.BigEndian.AppendUint32(out, uint32(uint64(n)<<20%65521)<<16|1)
}
