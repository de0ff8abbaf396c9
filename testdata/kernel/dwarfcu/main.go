// Command dwarfcu cuts one compilation unit out of a vmlinux's DWARF into
// a small ELF file that unwind/debuginfo reads like the vmlinux itself,
// for the tests of structure offsets from DWARF (issue 25), which cannot
// ship Debian's 273 MB -dbg vmlinux:
//
//	go run ./testdata/kernel/dwarfcu -vmlinux VMLINUX -out testdata/kernel/deb-6.1-mod/vmlinux-cu0.debug.gz
//
// The file (ET_EXEC, the vmlinux's machine) holds .debug_info with the
// unit at -unit (offset 0 by default, the first: in Debian's 6.1 it
// defines task_struct, thread_struct, cpu_context, pt_regs, thread_info,
// module, module_layout and mod_kallsyms), its abbreviation table alone as
// .debug_abbrev (the unit header's offset rewritten to 0), .debug_str with
// only the strings the unit's DW_FORM_strp attributes name and
// .debug_line_str with those of its DW_FORM_line_strp (their offsets in
// the unit rewritten). Everything in it is the
// vmlinux's own bytes; nothing is recompiled. It lives under testdata so
// the module never links it.
package main

import (
	"bytes"
	"compress/gzip"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
)

func main() {
	vmlinux := flag.String("vmlinux", "", "the vmlinux with DWARF")
	out := flag.String("out", "", "the gzip-compressed ELF to write")
	unit := flag.Uint64("unit", 0, "the .debug_info offset of the unit")
	flag.Parse()
	if *vmlinux == "" || *out == "" {
		log.Fatal("usage: dwarfcu -vmlinux VMLINUX -out FILE.gz [-unit OFFSET]")
	}
	ef, err := elf.Open(*vmlinux)
	if err != nil {
		log.Fatal(err)
	}
	sec := func(name string) []byte {
		s := ef.Section(name)
		if s == nil {
			return nil
		}
		b, err := s.Data()
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		return b
	}
	info, abbrev, str, lineStr := sec(".debug_info"), sec(".debug_abbrev"), sec(".debug_str"), sec(".debug_line_str")
	le := binary.LittleEndian
	off := *unit
	if off+12 > uint64(len(info)) {
		log.Fatalf("no unit at %#x", off)
	}
	length := uint64(le.Uint32(info[off:]))
	if length >= 0xfffffff0 {
		log.Fatal("64-bit DWARF units are not handled")
	}
	u := append([]byte(nil), info[off:off+4+length]...)
	version := le.Uint16(u[4:])
	abOff := 6 // DWARF 2-4: length, version, abbrev offset
	if version >= 5 {
		abOff = 8 // length, version, unit type, address size, abbrev offset
	}
	ab := uint64(le.Uint32(u[abOff:]))
	n := abbrevSize(abbrev[ab:])
	le.PutUint32(u[abOff:], 0)
	tab := abbrev[ab : ab+n]

	// .debug_str: only the strings the unit's DW_FORM_strp attributes
	// name, each once, the offsets in the unit rewritten.
	abbrevs := parseAbbrevs(tab)
	hdr := 11
	if version >= 5 {
		hdr = 12
	}
	var kept, keptLine []byte
	moved, movedLine := map[uint32]uint32{}, map[uint32]uint32{}
	nstr := 0
	move := func(p int, str []byte, kept *[]byte, moved map[uint32]uint32) {
		o := le.Uint32(u[p:])
		n, ok := moved[o]
		if !ok {
			j := bytes.IndexByte(str[o:], 0)
			if j < 0 {
				log.Fatalf("string offset %#x: no NUL", o)
			}
			n = uint32(len(*kept))
			*kept = append(append(*kept, str[o:int(o)+j]...), 0)
			moved[o] = n
			nstr++
		}
		le.PutUint32(u[p:], n)
	}
	err = walkDIEs(u, hdr, abbrevs, func(p int, form uint64) {
		if form == 0x0e {
			move(p, str, &kept, moved)
		} else {
			move(p, lineStr, &keptLine, movedLine)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	nkept := len(kept)
	want := make([]struct{}, nstr)
	// Check: debug/dwarf reads the rewritten unit.
	d, err := dwarf.New(tab, nil, nil, u, nil, nil, nil, kept)
	if err != nil {
		log.Fatal(err)
	}
	d.AddSection(".debug_line_str", keptLine)
	for r := d.Reader(); ; {
		e, err := r.Next()
		if err != nil {
			log.Fatal(err)
		}
		if e == nil {
			break
		}
	}
	var buf bytes.Buffer
	if err := writeELF(&buf, ef.Machine, []section{
		{".debug_info", u}, {".debug_abbrev", tab}, {".debug_str", kept}, {".debug_line_str", keptLine},
	}); err != nil {
		log.Fatal(err)
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(buf.Bytes())
	zw.Close()
	if err := os.WriteFile(*out, gz.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: unit %#x (%d bytes, DWARF %d), abbrev %d bytes, %d strings, %d of %d .debug_str bytes kept; ELF %d bytes, gzip %d\n",
		*out, off, len(u), version, len(tab), len(want), nkept, len(str), buf.Len(), gz.Len())
	_ = d
}

type abbrevEntry struct {
	children bool
	specs    [][2]uint64 // attribute, form
}

func parseAbbrevs(b []byte) map[uint64]abbrevEntry {
	out := map[uint64]abbrevEntry{}
	p := 0
	for {
		code, n := uleb(b[p:])
		p += n
		if code == 0 {
			return out
		}
		_, n = uleb(b[p:]) // tag
		p += n
		e := abbrevEntry{children: b[p] != 0}
		p++
		for {
			at, n1 := uleb(b[p:])
			form, n2 := uleb(b[p+n1:])
			p += n1 + n2
			if at == 0 && form == 0 {
				break
			}
			if form == 0x21 { // implicit_const: its value is in the table
				_, n := uleb(b[p:])
				p += n
			}
			e.specs = append(e.specs, [2]uint64{at, form})
		}
		out[code] = e
	}
}

func uleb(b []byte) (uint64, int) {
	var v uint64
	for i, c := range b {
		v |= uint64(c&0x7f) << (7 * uint(i))
		if c&0x80 == 0 {
			return v, i + 1
		}
	}
	log.Fatal("truncated LEB128")
	return 0, 0
}

// walkDIEs calls strp with the position and form of every DW_FORM_strp
// and DW_FORM_line_strp value of the unit u (32-bit DWARF, 8-byte
// addresses), whose DIEs start at hdr.
func walkDIEs(u []byte, hdr int, abbrevs map[uint64]abbrevEntry, strp func(p int, form uint64)) error {
	le := binary.LittleEndian
	for p := hdr; p < len(u); {
		code, n := uleb(u[p:])
		p += n
		if code == 0 {
			continue
		}
		e, ok := abbrevs[code]
		if !ok {
			return fmt.Errorf("DIE at %#x: abbreviation %d not in the table", p, code)
		}
		for _, sp := range e.specs {
			form := sp[1]
			for form == 0x16 { // indirect
				f, n := uleb(u[p:])
				p += n
				form = f
			}
			switch form {
			case 0x0e, 0x1f: // strp, line_strp
				strp(p, form)
				p += 4
			case 0x01, 0x07, 0x14, 0x20, 0x24: // addr (8), data8, ref8, ref_sig8, ref_sup8
				p += 8
			case 0x1e: // data16
				p += 16
			case 0x05, 0x12, 0x26, 0x2a: // data2, ref2, strx2, addrx2
				p += 2
			case 0x27, 0x2b: // strx3, addrx3
				p += 3
			case 0x06, 0x10, 0x13, 0x17, 0x1c, 0x1d, 0x28, 0x2c: // 4-byte forms
				p += 4
			case 0x0b, 0x0c, 0x11, 0x25, 0x29: // data1, flag, ref1, strx1, addrx1
				p++
			case 0x19, 0x21: // flag_present, implicit_const
			case 0x08: // string
				j := bytes.IndexByte(u[p:], 0)
				if j < 0 {
					return fmt.Errorf("string at %#x: no NUL", p)
				}
				p += j + 1
			case 0x0d, 0x0f, 0x15, 0x1a, 0x1b, 0x22, 0x23: // sdata, udata, ref_udata, strx, addrx, loclistx, rnglistx
				_, n := uleb(u[p:])
				p += n
			case 0x18, 0x09: // exprloc, block
				l, n := uleb(u[p:])
				p += n + int(l)
			case 0x0a: // block1
				p += 1 + int(u[p])
			case 0x03: // block2
				p += 2 + int(le.Uint16(u[p:]))
			case 0x04: // block4
				p += 4 + int(le.Uint32(u[p:]))
			default:
				return fmt.Errorf("form %#x at %#x not handled", form, p)
			}
		}
	}
	return nil
}

// abbrevSize is the length of the abbreviation table at the start of b.
func abbrevSize(b []byte) uint64 {
	p := 0
	uleb := func() uint64 {
		var v uint64
		for shift := uint(0); ; shift += 7 {
			c := b[p]
			p++
			v |= uint64(c&0x7f) << shift
			if c&0x80 == 0 {
				return v
			}
		}
	}
	for {
		if uleb() == 0 { // code
			return uint64(p)
		}
		uleb() // tag
		p++    // children
		for {
			at, form := uleb(), uleb()
			if at == 0 && form == 0 {
				break
			}
			if form == 0x21 { // DW_FORM_implicit_const
				uleb()
			}
		}
	}
}

type section struct {
	name string
	data []byte
}

// writeELF writes a little-endian ELF64 ET_EXEC file holding only the
// given sections (and .shstrtab).
func writeELF(w *bytes.Buffer, mach elf.Machine, secs []section) error {
	le := binary.LittleEndian
	shstr := []byte{0}
	names := make([]uint32, len(secs)+1)
	for i, s := range secs {
		names[i] = uint32(len(shstr))
		shstr = append(append(shstr, s.name...), 0)
	}
	names[len(secs)] = uint32(len(shstr))
	shstr = append(append(shstr, ".shstrtab"...), 0)
	secs = append(secs, section{".shstrtab", shstr})
	body := 64
	offs := make([]int, len(secs))
	for i, s := range secs {
		offs[i] = body
		body += len(s.data)
	}
	shoff := (body + 7) &^ 7
	var h [64]byte
	copy(h[:], "\x7fELF")
	h[4], h[5], h[6] = 2, 1, 1 // ELFCLASS64, ELFDATA2LSB, EV_CURRENT
	le.PutUint16(h[16:], uint16(elf.ET_EXEC))
	le.PutUint16(h[18:], uint16(mach))
	le.PutUint32(h[20:], 1)
	le.PutUint64(h[40:], uint64(shoff))
	le.PutUint16(h[52:], 64) // e_ehsize
	le.PutUint16(h[58:], 64) // e_shentsize
	le.PutUint16(h[60:], uint16(len(secs)+1))
	le.PutUint16(h[62:], uint16(len(secs))) // e_shstrndx: the last
	w.Write(h[:])
	for _, s := range secs {
		w.Write(s.data)
	}
	w.Write(make([]byte, shoff-body))
	w.Write(make([]byte, 64)) // the null section
	for i, s := range secs {
		var sh [64]byte
		le.PutUint32(sh[0:], names[i])
		le.PutUint32(sh[4:], uint32(elf.SHT_PROGBITS))
		if s.name == ".shstrtab" {
			le.PutUint32(sh[4:], uint32(elf.SHT_STRTAB))
		}
		le.PutUint64(sh[24:], uint64(offs[i]))
		le.PutUint64(sh[32:], uint64(len(s.data)))
		le.PutUint64(sh[48:], 1)
		w.Write(sh[:])
	}
	return nil
}
