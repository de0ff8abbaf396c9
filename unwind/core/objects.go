package core

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"path"
	"sort"

	"github.com/unwindkit/unwindkit/internal/symtab/elfsym"
	"github.com/unwindkit/unwindkit/unwind"
)

// Object is the executable or a shared object mapped in the process.
type Object struct {
	// Path is the object's path in the process (link map or NT_FILE), or
	// the file given for the executable.
	Path string
	// File is the file the symbols were read from ("" if none was given).
	File string
	// Bias is the load bias: run-time address minus link-time address.
	Bias uint64
	// BiasFrom says how Bias was found.
	BiasFrom string
	// Symbols is the number of function symbols read (.symtab, else
	// .dynsym).
	Symbols int
}

// Symbolizer returns the symbolizer over every object's functions at their
// run-time addresses.
func (c *Core) Symbolizer() *unwind.Symbolizer { return c.sym }

func (c *Core) warnf(format string, args ...any) {
	c.Warnings = append(c.Warnings, fmt.Sprintf(format, args...))
}

// loadObjects finds each object's load bias and reads its symbols.
func (c *Core) loadObjects(objs []ObjectFile) {
	var syms []unwind.Symbol
	byBase := map[string]*ObjectFile{}
	for i := range objs[min(1, len(objs)):] {
		o := &objs[1+i]
		byBase[path.Base(o.Path)] = o
	}
	if len(objs) > 0 {
		exe := objs[0]
		ef, err := openObject(exe.Data)
		if err != nil {
			c.warnf("executable %s: %v", exe.Path, err)
		} else {
			obj := Object{Path: exe.Path, File: exe.Path}
			obj.Bias, obj.BiasFrom = c.exeBias(ef)
			s := c.funcSymbols("executable", exe, ef, obj.Bias)
			obj.Symbols = len(s)
			syms = append(syms, s...)
			c.Objects = append(c.Objects, obj)
			for _, lm := range c.linkMap(ef, obj.Bias) {
				if lm.fromFile && path.Base(lm.Path) == path.Base(exe.Path) {
					continue // the executable's own mapping
				}
				o := byBase[path.Base(lm.Path)]
				lo := Object{Path: lm.Path, Bias: lm.Start, BiasFrom: "link map l_addr"}
				if lm.fromFile {
					lo.BiasFrom = "NT_FILE mapping of file offset 0"
				}
				if o != nil {
					if lf, err := openObject(o.Data); err == nil {
						lo.File = o.Path
						if lm.fromFile {
							// The mapping of offset 0 starts at the
							// first PT_LOAD's page: subtract its
							// link-time address.
							lo.Bias -= firstLoadPage(lf)
						}
						s := c.funcSymbols("library", *o, lf, lo.Bias)
						lo.Symbols = len(s)
						syms = append(syms, s...)
					} else {
						c.warnf("library %s: %v", o.Path, err)
					}
				}
				c.Objects = append(c.Objects, lo)
			}
		}
	}
	c.sym = unwind.NewSymbolizer(syms)
}

// exeBias returns the executable's load bias: 0 for ET_EXEC; for ET_DYN
// (PIE) AT_ENTRY - e_entry, checked against AT_PHDR - the program
// headers' link-time address.
func (c *Core) exeBias(ef *elf.File) (uint64, string) {
	if ef.Type != elf.ET_DYN {
		return 0, "ET_EXEC: linked at its run-time address"
	}
	entry, okE := c.Aux[atEntry]
	phdr, okP := c.Aux[atPhdr]
	var phVaddr uint64
	hasPh := false
	for _, p := range ef.Progs {
		if p.Type == elf.PT_PHDR {
			phVaddr, hasPh = p.Vaddr, true
		}
	}
	switch {
	case okE && okP && hasPh && entry-ef.Entry != phdr-phVaddr:
		c.warnf("AT_ENTRY and AT_PHDR disagree on the load bias (%#x, %#x): using AT_ENTRY", entry-ef.Entry, phdr-phVaddr)
		return entry - ef.Entry, "AT_ENTRY - e_entry"
	case okE:
		return entry - ef.Entry, "AT_ENTRY - e_entry"
	case okP && hasPh:
		return phdr - phVaddr, "AT_PHDR - PT_PHDR's address"
	}
	for _, m := range c.Files {
		if m.FileOff == 0 {
			c.warnf("no AT_ENTRY/AT_PHDR: using the first mapping %s at %#x", m.Path, m.Start)
			return m.Start, "first NT_FILE mapping"
		}
	}
	c.warnf("PIE without AT_ENTRY, AT_PHDR or NT_FILE: load bias assumed 0")
	return 0, "unknown (assumed 0)"
}

// linkEntry is one struct link_map: l_addr (the bias) and l_name; or,
// fromFile, an NT_FILE mapping of file offset 0 starting at Start.
type linkEntry struct {
	Start    uint64
	Path     string
	fromFile bool
}

// firstLoadPage returns the page-aligned link-time address of ef's
// PT_LOAD of file offset 0.
func firstLoadPage(ef *elf.File) uint64 {
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			return p.Vaddr &^ 0xfff
		}
	}
	return 0
}

// linkMap walks r_debug->r_map through the executable's DT_DEBUG in the
// core's memory (glibc's struct r_debug: r_version int, r_map at 8;
// struct link_map: l_addr 0, l_name 8, l_ld 16, l_next 24). Without
// DT_DEBUG or its memory it falls back to NT_FILE's mappings of offset 0.
func (c *Core) linkMap(ef *elf.File, bias uint64) []linkEntry {
	var out []linkEntry
	var dyn *elf.Prog
	for _, p := range ef.Progs {
		if p.Type == elf.PT_DYNAMIC {
			dyn = p
		}
	}
	le := binary.LittleEndian
	word := func(addr uint64) (uint64, bool) {
		var b [8]byte
		if c.f.ReadAt(b[:], addr) != nil {
			return 0, false
		}
		return le.Uint64(b[:]), true
	}
	var rdebug uint64
	if dyn != nil {
		for i := uint64(0); i < min(dyn.Memsz/16, 4096); i++ {
			tag, ok := word(dyn.Vaddr + bias + 16*i)
			if !ok || tag == 0 {
				break
			}
			if tag == uint64(elf.DT_DEBUG) {
				rdebug, _ = word(dyn.Vaddr + bias + 16*i + 8)
			}
		}
	}
	if rdebug != 0 {
		lm, ok := word(rdebug + 8)
		seen := map[uint64]bool{}
		for n := 0; ok && lm != 0 && n < 1024 && !seen[lm]; n++ {
			seen[lm] = true
			addr, ok1 := word(lm)
			name, ok2 := word(lm + 8)
			next, ok3 := word(lm + 24)
			if !ok1 || !ok2 || !ok3 {
				c.warnf("link map entry at %#x not in the core", lm)
				break
			}
			if p := c.cstring(name); p != "" {
				out = append(out, linkEntry{Start: addr, Path: p})
			}
			lm = next
		}
		if len(out) > 0 {
			return out
		}
	}
	if dyn != nil && len(c.Files) == 0 {
		c.warnf("dynamic executable: no link map in the core and no NT_FILE: libraries are not symbolized")
	}
	seen := map[string]bool{}
	for _, m := range c.Files {
		if m.FileOff == 0 && !seen[m.Path] {
			seen[m.Path] = true
			out = append(out, linkEntry{Start: m.Start, Path: m.Path, fromFile: true})
		}
	}
	return out
}

// cstring reads a NUL-terminated string of at most 4096 bytes.
func (c *Core) cstring(addr uint64) string {
	var out []byte
	var b [64]byte
	for len(out) < 4096 {
		if c.f.ReadAt(b[:1], addr) != nil {
			break
		}
		n := 1
		for ; n < len(b); n++ {
			if c.f.ReadAt(b[n:n+1], addr+uint64(n)) != nil {
				break
			}
		}
		if i := bytes.IndexByte(b[:n], 0); i >= 0 {
			return string(append(out, b[:i]...))
		}
		out = append(out, b[:n]...)
		addr += uint64(n)
	}
	return ""
}

// openObject checks an object's section headers against what debug/elf
// would read without a bound (elfsym.CheckELF), then opens it.
func openObject(b []byte) (*elf.File, error) {
	if err := elfsym.CheckELF(bytes.NewReader(b), int64(len(b))); err != nil {
		return nil, err
	}
	return elf.NewFile(bytes.NewReader(b))
}

// funcSymbols returns ef's function symbols (.symtab, else .dynsym) moved
// by bias, with sizes from the next symbol where the size is 0. The
// tables are read with internal/symtab/elfsym's bounds: a table that breaks
// them (a compressed section inflating past its budget, a table outside
// the file) is a warning naming the object (what is the executable or a
// library), and so are names cut to elfsym.MaxNameLen.
func (c *Core) funcSymbols(what string, o ObjectFile, ef *elf.File, bias uint64) []unwind.Symbol {
	rd := elfsym.NewELFReader(ef, int64(len(o.Data)))
	var t *elfsym.ELFTable
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		tt, err := rd.Funcs(typ)
		if err != nil {
			c.warnf("%s %s: %v: %s symbols not read", what, o.Path, err, typ)
			continue
		}
		if tt != nil && len(tt.Funcs) > 0 {
			t = tt
			break
		}
	}
	if t == nil {
		return nil
	}
	if t.Cut > 0 {
		c.warnf("%s %s: %d names in %s longer than %d bytes cut to %d", what, o.Path, t.Cut, t.Name, elfsym.MaxNameLen, elfsym.MaxNameLen)
	}
	var out []unwind.Symbol
	for _, s := range t.Funcs {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
			continue
		}
		out = append(out, unwind.Symbol{Name: s.Name, Addr: s.Value + bias, Size: s.Size})
	}
	// By address, aliases by name: the same core always names a pc the
	// same way.
	sort.Slice(out, func(i, j int) bool {
		if out[i].Addr != out[j].Addr {
			return out[i].Addr < out[j].Addr
		}
		return out[i].Name < out[j].Name
	})
	for i := range out {
		if out[i].Size == 0 && i+1 < len(out) {
			out[i].Size = out[i+1].Addr - out[i].Addr
		}
	}
	return out
}
