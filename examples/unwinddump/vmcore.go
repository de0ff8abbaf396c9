package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// dumpVmcore prints what a kernel vmcore says about itself (-info).
func dumpVmcore(w io.Writer, path string) error {
	src, err := openInput(path, coreRatio)
	if err != nil {
		return err
	}
	defer src.close()
	v, err := vmcore.Load(path, src, src.size)
	if err != nil {
		return err
	}
	if !v.HasInfo {
		return fmt.Errorf("%s: no VMCOREINFO note (and no executable given: not a user core?)", path)
	}
	return describeVmcore(w, path, v)
}

// describeVmcore prints what a kernel vmcore says about itself:
// VMCOREINFO, the translation regime, the symbols decoded from the dump,
// the structure offsets with their sources, and each CPU's registers
// symbolized.
func describeVmcore(w io.Writer, path string, v *vmcore.Vmcore) error {
	in := v.Info
	fmt.Fprintf(w, "vmcore %s: Linux %s, %d CPU(s)\n", path, in.OSRelease, len(v.CPUs))
	fmt.Fprintf(w, "pages %d KiB, VA_BITS %d (running with %d), PAGE_OFFSET %#x, kimage_voffset %#x, PHYS_OFFSET %#x, KERNELPACMASK %#x\n",
		in.PageSize>>10, in.VABits, in.VABitsActual, v.PageOffset, in.KimageVoffset, in.PhysOffset, in.KernelPACMask)
	fmt.Fprintf(w, "translation: %s\n", v.Translation())
	syms, err := v.Kallsyms()
	if err != nil {
		fmt.Fprintf(w, "kallsyms: %v\n", err)
	} else {
		fmt.Fprintf(w, "kallsyms: %d symbols decoded from the dump\n", len(syms))
	}
	btf, err := v.BTF(syms)
	if err != nil {
		fmt.Fprintf(w, "btf: %v\n", err)
	}
	offs := v.Offsets(btf)
	for _, k := range vmcore.OffsetKeys {
		o := offs[k]
		if o.Source == "" {
			fmt.Fprintf(w, "  %-32s unknown\n", k)
			continue
		}
		fmt.Fprintf(w, "  %-32s %5d  (%s)\n", k, o.Value, o.Source)
	}
	name := func(pc uint64) string {
		i := sort.Search(len(syms), func(i int) bool { return syms[i].Addr > pc }) - 1
		if i < 0 || syms[i].Size != 0 && pc-syms[i].Addr >= syms[i].Size {
			return fmt.Sprintf("%#x", pc)
		}
		return fmt.Sprintf("%s+%#x", syms[i].Name, pc-syms[i].Addr)
	}
	for i, c := range v.CPUs {
		r := &c.Regs
		fmt.Fprintf(w, "cpu%d: pc %s, x30 %#x (%s), sp %#x, x29 %#x\n", i, name(r.PC), r.X[30], name(v.Layout.Strip(r.X[30])), r.SP, r.X[29])
		if lr, err := v.ReadVirt64(r.X[29] + 8); err == nil {
			fmt.Fprintf(w, "      frame record at x29: lr %#x (%s)\n", lr, name(v.Layout.Strip(lr)))
		} else {
			fmt.Fprintf(w, "      frame record at x29: %v\n", err)
		}
	}
	return nil
}
