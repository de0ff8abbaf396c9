package vmcore

import "fmt"

// maxCPUs bounds the per-CPU offsets read (NR_CPUS is at most 4096 on
// arm64).
const maxCPUs = 4096

// PerCPUOffsets reads __per_cpu_offset[0..n) (include/asm-generic/percpu.h):
// the address of CPU c's copy of a per-CPU variable v is &v +
// offsets[c]. The array is a data symbol: it comes from a
// SYMBOL(__per_cpu_offset) line of VMCOREINFO when there is one, else from
// syms (kallsyms lists data symbols only with CONFIG_KALLSYMS_ALL).
func (v *Vmcore) PerCPUOffsets(syms []KSym, n int) ([]uint64, error) {
	if n <= 0 || n > maxCPUs {
		return nil, fmt.Errorf("%s: %d CPUs outside [1, %d]", v.Path, n, maxCPUs)
	}
	addr, ok := v.Info.Symbol("__per_cpu_offset")
	for _, s := range syms {
		if !ok && s.Name == "__per_cpu_offset" {
			addr, ok = s.Addr, true
		}
	}
	if !ok {
		return nil, fmt.Errorf("%s: __per_cpu_offset is not among the symbols (kallsyms lists it only with CONFIG_KALLSYMS_ALL)", v.Path)
	}
	out := make([]uint64, n)
	for c := range out {
		w, err := v.ReadVirt64(addr + 8*uint64(c))
		if err != nil {
			return nil, readErr(fmt.Sprintf("__per_cpu_offset[%d]", c), addr+8*uint64(c), err)
		}
		out[c] = w
	}
	return out, nil
}
