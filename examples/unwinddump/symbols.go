package main

import (
	"fmt"
	"io"

	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// symSource is one symbol source of a vmcore: the dump's kallsyms tables
// or a file given beside it.
type symSource struct {
	name string // the file, or "the dump's kallsyms"
	what string // "kallsyms in the dump", "symbol map", "vmlinux"
	syms []vmcore.KSym
	// linkTime says the addresses are the link's (System.map, vmlinux)
	// until checked against the dump.
	linkTime bool
	btf      *vmcore.BTF // a vmlinux's .BTF, nil if none
	in       *input      // a vmlinux's bytes
	shift    uint64      // what relocate added to the addresses
}

// kernelSymbols gathers the vmcore's symbols: the kallsyms tables in the
// dump and the files given (symbol maps, vmlinux), relocated to the
// running kernel, and merges them: the first source with functions gives
// the functions (their sizes are the distance to the next symbol, as
// kallsyms computes them), the others add the data symbols it lacks
// (kernel.MergeDataSyms: at or above _etext, so no function's size
// changes). The notes say what came from where.
func kernelSymbols(v *vmcore.Vmcore, files []string, stderr io.Writer, l *lines) ([]vmcore.KSym, []*symSource, []string, error) {
	var srcs []*symSource
	var notes []string
	if v.Live && len(files) == 0 {
		// The running kernel's own symbols, modules included.
		files = []string{"/proc/kallsyms"}
		notes = append(notes, "live kernel: symbols from /proc/kallsyms")
	}
	// A live kernel's /proc/kallsyms comes first: the dump's tables
	// lack the modules.
	if !v.Live {
		if ks, err := v.Kallsyms(); err == nil && len(ks) > 0 {
			srcs = append(srcs, &symSource{name: v.Path, what: "kallsyms tables in the dump", syms: ks})
		} else if err != nil {
			notes = append(notes, fmt.Sprintf("kallsyms in the dump: %v", err))
		}
	}
	for _, f := range files {
		k, err := sniff(f)
		if err != nil {
			return nil, nil, nil, err
		}
		s := &symSource{name: f}
		switch k {
		case kindSymText:
			in, err := openInput(f, objectRatio)
			if err != nil {
				return nil, nil, nil, err
			}
			s.what = "symbol map"
			// Read as a stream: ParseSystemMap bounds the lines and
			// the symbols, so a large file costs no copy of itself.
			s.syms, err = vmcore.ParseSystemMap(f, io.NewSectionReader(in, 0, in.size))
			in.close()
			if err != nil {
				return nil, nil, nil, err
			}
			s.linkTime = true // decided by relocate
		case kindELF:
			in, err := openInput(f, objectRatio)
			if err != nil {
				return nil, nil, nil, err
			}
			s.what = "vmlinux"
			s.syms, err = vmcore.VmlinuxSymbols(f, in, in.size)
			if err == nil {
				s.btf, _ = vmcore.VmlinuxBTF(f, in, in.size)
			}
			if err != nil {
				in.close()
				return nil, nil, nil, err
			}
			s.linkTime = true
			s.in = in // kept open for its DWARF, if any (closed at exit)
		default:
			return nil, nil, nil, fmt.Errorf("%w: %s is %s, not a kernel symbol source (System.map, /proc/kallsyms text or vmlinux)", errUsage, f, k)
		}
		notes = append(notes, relocate(v, s))
		srcs = append(srcs, s)
		if s.in != nil {
			n := len(l.files)
			l.add(stderr, f, s.in, s.in.size, s.shift)
			if len(l.files) > n {
				notes = append(notes, fmt.Sprintf("%s: DWARF: file:line and inlined frames from it", f))
			}
		}
	}
	if len(srcs) == 0 {
		return nil, nil, notes, fmt.Errorf("%s: no symbols: the dump holds no kallsyms tables (VMCOREINFO lacks them or their pages are not in the dump); give System.map, /proc/kallsyms text or vmlinux after it", v.Path)
	}
	syms := srcs[0].syms
	notes = append(notes, fmt.Sprintf("symbols: %d from %s (%s)", len(syms), srcs[0].name, srcs[0].what))
	for _, s := range srcs[1:] {
		n := len(syms)
		syms = kernel.MergeDataSyms(syms, s.syms)
		notes = append(notes, fmt.Sprintf("symbols: %d data symbols added from %s (%s)", len(syms)-n, s.name, s.what))
	}
	return syms, srcs, notes, nil
}

// relocate moves a file's symbols to the running kernel's addresses and
// says how it decided: System.map and vmlinux hold the link addresses,
// which KASLR moves by KERNELOFFSET (VMCOREINFO); /proc/kallsyms text
// holds the running ones. The file's swapper_pg_dir (or _text) is
// compared with the dump's SYMBOL(swapper_pg_dir) to tell them apart.
func relocate(v *vmcore.Vmcore, s *symSource) string {
	off := v.Info.KernelOffset
	find := func(name string) (uint64, bool) {
		for _, k := range s.syms {
			if k.Name == name {
				return k.Addr, true
			}
		}
		return 0, false
	}
	shift := func() {
		s.shift = off
		for i := range s.syms {
			if s.syms[i].Type != 'a' && s.syms[i].Type != 'A' {
				s.syms[i].Addr += off
			}
		}
		vmcore.SortSizes(s.syms)
	}
	if off == 0 {
		return fmt.Sprintf("%s (%s): %d symbols; KERNELOFFSET 0: link and run addresses agree", s.name, s.what, len(s.syms))
	}
	want, ok := v.Info.Symbol("swapper_pg_dir")
	got, ok2 := find("swapper_pg_dir")
	switch {
	case ok && ok2 && got == want:
		return fmt.Sprintf("%s (%s): %d symbols at run-time addresses (swapper_pg_dir agrees with VMCOREINFO)", s.name, s.what, len(s.syms))
	case ok && ok2 && got+off == want:
		shift()
		return fmt.Sprintf("%s (%s): %d symbols moved by KERNELOFFSET %#x (swapper_pg_dir + it agrees with VMCOREINFO)", s.name, s.what, len(s.syms), off)
	case s.linkTime && s.what == "vmlinux":
		shift()
		return fmt.Sprintf("%s (%s): %d symbols moved by KERNELOFFSET %#x (a guess: no swapper_pg_dir to check)", s.name, s.what, len(s.syms), off)
	}
	return fmt.Sprintf("%s (%s): %d symbols taken as run-time addresses (a guess: KERNELOFFSET %#x, and no swapper_pg_dir to check)", s.name, s.what, len(s.syms), off)
}
