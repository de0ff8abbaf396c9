package kernel

import (
	"encoding/binary"
	"fmt"

	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// Module is a loaded kernel module, read from the dump's module list
// (the kernel's `modules` list of struct module, kernel/module/main.c).
type Module struct {
	// Addr is the struct module's address; Name is module->name.
	Addr uint64
	Name string
	// Base and Size are the module's core memory (core_layout up to
	// 6.3, mem[MOD_TEXT] from 6.4); TextSize is its text part, where the
	// kernel's symbol lookup bounds the last function.
	Base, Size, TextSize uint64
	// Syms are the module's named, defined symbols from its kallsyms
	// (module->kallsyms: the core symbol table once init has run), in
	// symbol table order; Type is kallsyms' letter from the typetab.
	Syms []vmcore.KSym
}

// Limits on what the module list may make the reader allocate or read.
const (
	maxModules    = 1 << 12 // modules in the list
	maxModuleSyms = 1 << 18 // symbols of one module (24-byte Elf64_Sym each)
	maxModSymsAll = 1 << 20 // symbols of all modules
	moduleNameLen = 56      // MODULE_NAME_LEN: 64 - sizeof(unsigned long)
	ksymNameLen   = 512     // KSYM_NAME_LEN
	moduleUnform  = 3       // MODULE_STATE_UNFORMED
)

// Modules reads the loaded modules from the dump: the `modules` list head
// (a data symbol: from vmlinux or System.map when kallsyms lacks data
// symbols), each struct module's name, state, core memory and kallsyms
// symbol table (symtab, num_symtab, strtab, typetab), with the structure
// offsets from BTF (or [Options.Types]). Modules still being formed
// (MODULE_STATE_UNFORMED) are skipped, as the kernel's lookups skip them.
// The result is read once and kept: [Kernel.Sym] names module text from it.
func (k *Kernel) Modules() ([]Module, error) {
	k.modOnce.Do(func() { k.mods, k.modsErr = k.readModules() })
	return k.mods, k.modsErr
}

// modOffsets are the struct module offsets the reader needs.
type modOffsets struct {
	list, name, state, kallsyms      uint64
	base, size, textSize             uint64
	textSizeIsSize                   bool // 6.4+: mem[MOD_TEXT].size is the text
	symtab, numSymtab, strtab, type_ uint64
	hasType                          bool
}

func (k *Kernel) moduleOffsets() (modOffsets, error) {
	var o modOffsets
	get := func(dst *uint64, key string) error {
		v, err := k.typeOffset(key)
		if err != nil {
			return err
		}
		*dst = v
		return nil
	}
	for _, f := range []struct {
		dst *uint64
		key string
	}{{&o.list, "module.list"}, {&o.name, "module.name"}, {&o.state, "module.state"},
		{&o.kallsyms, "module.kallsyms"}, {&o.symtab, "mod_kallsyms.symtab"},
		{&o.numSymtab, "mod_kallsyms.num_symtab"}, {&o.strtab, "mod_kallsyms.strtab"}} {
		if err := get(f.dst, f.key); err != nil {
			return o, err
		}
	}
	o.hasType = get(&o.type_, "mod_kallsyms.typetab") == nil
	// Up to 6.3: struct module_layout core_layout {base, size, text_size, ...}.
	var cl uint64
	if err := get(&cl, "module.core_layout"); err == nil {
		var b, s, t uint64
		if err := get(&b, "module_layout.base"); err != nil {
			return o, err
		}
		if err := get(&s, "module_layout.size"); err != nil {
			return o, err
		}
		if err := get(&t, "module_layout.text_size"); err != nil {
			return o, err
		}
		o.base, o.size, o.textSize = cl+b, cl+s, cl+t
		return o, nil
	}
	// 6.4 on: struct module_memory mem[MOD_MEM_NUM_TYPES], MOD_TEXT = 0.
	var mem, b, s uint64
	if err := get(&mem, "module.mem"); err != nil {
		return o, fmt.Errorf("struct module has neither core_layout nor mem: %w", err)
	}
	if err := get(&b, "module_memory.base"); err != nil {
		return o, err
	}
	if err := get(&s, "module_memory.size"); err != nil {
		return o, err
	}
	o.base, o.size, o.textSizeIsSize = mem+b, mem+s, true
	return o, nil
}

func (k *Kernel) readModules() ([]Module, error) {
	if k.V == nil || k.mem == nil {
		// A Kernel made without New (its Syms alone) has no dump.
		return nil, fmt.Errorf("modules: no dump to read them from (the Kernel was not made by New)")
	}
	head, ok := k.sym["modules"]
	if !ok {
		return nil, fmt.Errorf("%s: modules: the list head is not among the symbols (a data symbol: give System.map or vmlinux)", k.V.Path)
	}
	o, err := k.moduleOffsets()
	if err != nil {
		return nil, fmt.Errorf("%s: struct module: %w", k.V.Path, err)
	}
	var out []Module
	total := 0
	seen := map[uint64]bool{head: true}
	next, err := k.read64(head)
	if err != nil {
		return nil, fmt.Errorf("%s: modules at %#x: %w", k.V.Path, head, err)
	}
	for next != head {
		if seen[next] {
			return out, fmt.Errorf("%s: modules: list loops at %#x", k.V.Path, next)
		}
		seen[next] = true
		if len(out) >= maxModules {
			return out, fmt.Errorf("%s: modules: more than %d", k.V.Path, maxModules)
		}
		mod := next - o.list
		m, n, err := k.readModule(mod, o, maxModSymsAll-total)
		if err != nil {
			return out, fmt.Errorf("%s: %w", k.V.Path, err)
		}
		total += n
		if m != nil {
			out = append(out, *m)
		}
		if next, err = k.read64(mod + o.list); err != nil {
			return out, fmt.Errorf("%s: module %#x: list.next: %w", k.V.Path, mod, err)
		}
	}
	return out, nil
}

// readModule reads one struct module; nil for an unformed one. n is the
// number of symbols read, at most budget.
func (k *Kernel) readModule(mod uint64, o modOffsets, budget int) (*Module, int, error) {
	le := binary.LittleEndian
	var nb [moduleNameLen]byte
	if err := k.mem.ReadVirt(nb[:], mod+o.name); err != nil {
		return nil, 0, fmt.Errorf("module %#x: name: %w", mod, err)
	}
	m := &Module{Addr: mod, Name: cstring(nb[:])}
	var b4 [4]byte
	if err := k.mem.ReadVirt(b4[:], mod+o.state); err != nil {
		return nil, 0, fmt.Errorf("module %#x (%s): state: %w", mod, m.Name, err)
	}
	if le.Uint32(b4[:]) == moduleUnform {
		return nil, 0, nil
	}
	var err error
	if m.Base, err = k.read64(mod + o.base); err != nil {
		return nil, 0, fmt.Errorf("module %#x (%s): core base: %w", mod, m.Name, err)
	}
	if err := k.mem.ReadVirt(b4[:], mod+o.size); err != nil {
		return nil, 0, fmt.Errorf("module %#x (%s): core size: %w", mod, m.Name, err)
	}
	m.Size = uint64(le.Uint32(b4[:]))
	m.TextSize = m.Size
	if !o.textSizeIsSize {
		if err := k.mem.ReadVirt(b4[:], mod+o.textSize); err != nil {
			return nil, 0, fmt.Errorf("module %#x (%s): core text_size: %w", mod, m.Name, err)
		}
		m.TextSize = min(uint64(le.Uint32(b4[:])), m.Size)
	}
	ks, err := k.read64(mod + o.kallsyms)
	if err != nil {
		return nil, 0, fmt.Errorf("module %#x (%s): kallsyms: %w", mod, m.Name, err)
	}
	symtab, err := k.read64(ks + o.symtab)
	if err != nil {
		return nil, 0, fmt.Errorf("module %s: kallsyms %#x: symtab: %w", m.Name, ks, err)
	}
	if err := k.mem.ReadVirt(b4[:], ks+o.numSymtab); err != nil {
		return nil, 0, fmt.Errorf("module %s: kallsyms %#x: num_symtab: %w", m.Name, ks, err)
	}
	num := int(le.Uint32(b4[:]))
	if num > maxModuleSyms || num > budget {
		return nil, 0, fmt.Errorf("module %s: kallsyms %#x: num_symtab %d over the limit (%d per module, %d left of all modules')", m.Name, ks, num, maxModuleSyms, budget)
	}
	strtab, err := k.read64(ks + o.strtab)
	if err != nil {
		return nil, 0, fmt.Errorf("module %s: kallsyms %#x: strtab: %w", m.Name, ks, err)
	}
	var typetab uint64
	if o.hasType {
		if typetab, err = k.read64(ks + o.type_); err != nil {
			return nil, 0, fmt.Errorf("module %s: kallsyms %#x: typetab: %w", m.Name, ks, err)
		}
	}
	tab := make([]byte, num*24)
	if err := k.mem.ReadVirt(tab, symtab); err != nil {
		return nil, 0, fmt.Errorf("module %s: symtab %#x (%d symbols): %w", m.Name, symtab, num, err)
	}
	var types []byte
	if typetab != 0 {
		types = make([]byte, num)
		if err := k.mem.ReadVirt(types, typetab); err != nil {
			return nil, 0, fmt.Errorf("module %s: typetab %#x: %w", m.Name, typetab, err)
		}
	}
	sr := strReader{k: k}
	// Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16,
	// st_value u64, st_size u64. Index 0 is the null symbol.
	for i := 1; i < num; i++ {
		e := tab[i*24 : i*24+24]
		if le.Uint16(e[6:]) == 0 { // SHN_UNDEF
			continue
		}
		name, err := sr.read(strtab + uint64(le.Uint32(e[0:])))
		if err != nil {
			return nil, 0, fmt.Errorf("module %s: symbol %d: name at strtab %#x + %#x: %w", m.Name, i, strtab, le.Uint32(e[0:]), err)
		}
		if name == "" || isMappingSymbol(name) {
			continue
		}
		s := vmcore.KSym{Name: name, Addr: le.Uint64(e[8:]), Type: '?', Size: le.Uint64(e[16:]), Module: m.Name}
		if types != nil {
			s.Type = types[i]
		}
		m.Syms = append(m.Syms, s)
	}
	return m, num, nil
}

// isMappingSymbol is the kernel's is_mapping_symbol for modules (6.1's
// kernel/module/kallsyms.c): ".L..." and the ELF mapping symbols $a, $x,
// $t, $d (alone or followed by '.').
func isMappingSymbol(s string) bool {
	if len(s) >= 2 && s[0] == '.' && s[1] == 'L' {
		return true
	}
	if len(s) >= 2 && s[0] == '$' {
		switch s[1] {
		case 'a', 'x', 't', 'd':
			return len(s) == 2 || s[2] == '.'
		}
	}
	return false
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// strReader reads NUL-terminated strings of at most KSYM_NAME_LEN bytes,
// a page at a time, keeping the last page.
type strReader struct {
	k    *Kernel
	page []byte
	at   uint64 // the kept page's address; valid when page != nil
}

func (r *strReader) read(va uint64) (string, error) {
	ps := r.k.V.Info.PageSize
	if ps == 0 {
		ps = 4096
	}
	var out []byte
	for len(out) < ksymNameLen {
		pg := va &^ (ps - 1)
		if r.page == nil || r.at != pg {
			if r.page == nil {
				r.page = make([]byte, ps)
			}
			if err := r.k.mem.ReadVirt(r.page, pg); err != nil {
				r.page = nil
				return "", err
			}
			r.at = pg
		}
		for _, c := range r.page[va-pg:] {
			if c == 0 {
				return string(out), nil
			}
			out = append(out, c)
			if len(out) >= ksymNameLen {
				break
			}
		}
		va = pg + ps
	}
	return "", fmt.Errorf("name longer than KSYM_NAME_LEN (%d)", ksymNameLen)
}

// moduleSym names pc in a module's core memory as the kernel's
// find_kallsyms_symbol does: the defined, named symbol with the greatest
// value at or below pc (the first in table order among equal values), its
// size the distance to the next symbol above pc or to the end of the
// module's text. ok is false when pc is in no module or names nothing.
func (k *Kernel) moduleSym(pc uint64) (vmcore.KSym, bool, bool) {
	mods, err := k.Modules()
	if err != nil && len(mods) == 0 {
		return vmcore.KSym{}, false, false
	}
	for i := range mods {
		m := &mods[i]
		if pc < m.Base || pc-m.Base >= m.Size {
			continue
		}
		next := m.Base + m.TextSize
		best := -1
		for j, s := range m.Syms {
			if s.Addr <= pc && (best < 0 || s.Addr > m.Syms[best].Addr) {
				best = j
			}
			if s.Addr > pc && s.Addr < next {
				next = s.Addr
			}
		}
		if best < 0 {
			return vmcore.KSym{}, false, true
		}
		s := m.Syms[best]
		if next > s.Addr {
			s.Size = next - s.Addr
		} else {
			s.Size = 0
		}
		return s, true, true
	}
	return vmcore.KSym{}, false, false
}
