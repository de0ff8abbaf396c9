package vmcore

import "fmt"

// Offset is a structure offset or size and where it came from.
type Offset struct {
	Value uint64
	// Source is the Types' Origin ("btf" for the dump's BTF, "dwarf" for
	// a vmlinux's DWARF), "table <version>" (the per-version table,
	// checked against that version's source) or "" when unknown.
	Source string
}

// Types is a kernel's type information, where structure layouts come
// from: the byte offset of a member path ("task_struct.thread.cpu_context")
// and sizeof(struct name). *BTF is one (the dump's own); the DWARF of the
// kernel's vmlinux, unwind/debuginfo's Types, is another, for a dump
// without BTF. Origin names the kind ("btf", "dwarf").
type Types interface {
	Offset(path string) (uint64, error)
	Size(name string) (uint64, error)
	Origin() string
}

// Origin returns "btf".
func (t *BTF) Origin() string { return "btf" }

// OffsetKeys are the offsets an unwinder of a vmcore needs: member paths
// (byte offsets) and "sizeof(struct)".
var OffsetKeys = []string{
	"task_struct.thread_info", "task_struct.stack", "task_struct.thread.cpu_context",
	"thread_info.scs_base", "thread_info.scs_sp",
	"cpu_context.fp", "cpu_context.sp", "cpu_context.pc",
	"pt_regs.regs", "pt_regs.sp", "pt_regs.pc", "pt_regs.pstate", "pt_regs.stackframe", "sizeof(pt_regs)",
}

// offsetTable holds the config-independent layouts per kernel version,
// read from arch/arm64/include/asm/{ptrace,processor}.h of Debian's
// linux-source-6.1 and linux-source-6.12 (struct pt_regs is the same in
// both: regs[31], sp, pc, pstate, orig_x0, syscallno, unused2, sdei_ttbr1,
// pmr_save, stackframe[2], lockdep_hardirqs, exit_rcu). task_struct and
// thread_info depend on the configuration and are not tabulated (with
// CONFIG_THREAD_INFO_IN_TASK, as arm64 always has, thread_info is at 0).
//
// 7.2 (Debian sid's linux-source-7.2, 7.2.13): struct pt_regs is regs[31],
// sp, pc, pstate, orig_x0, syscallno, pmr, sdei_ttbr1 and the 24-byte meta
// record stackframe, last (320 bytes); cpu_context is unchanged.
var offsetTable = map[string]map[string]uint64{
	"6.1":  armLayout,
	"6.12": armLayout,
	"7.2":  armLayout72,
}

var armLayout72 = map[string]uint64{
	"task_struct.thread_info": 0,
	"cpu_context.fp":          80, "cpu_context.sp": 88, "cpu_context.pc": 96,
	"pt_regs.regs": 0, "pt_regs.sp": 248, "pt_regs.pc": 256, "pt_regs.pstate": 264,
	"pt_regs.stackframe": 296, "sizeof(pt_regs)": 320,
}

var armLayout = map[string]uint64{
	"task_struct.thread_info": 0,
	"cpu_context.fp":          80, "cpu_context.sp": 88, "cpu_context.pc": 96,
	"pt_regs.regs": 0, "pt_regs.sp": 248, "pt_regs.pc": 256, "pt_regs.pstate": 264,
	"pt_regs.stackframe": 304, "sizeof(pt_regs)": 336,
}

// Offsets returns every key of OffsetKeys: from types when it is non-nil
// (a nil *BTF is none) and has the member, else from the table for the
// dump's kernel version, else unknown (Source "").
func (v *Vmcore) Offsets(types Types) map[string]Offset {
	if b, ok := types.(*BTF); ok && b == nil {
		types = nil
	}
	btf := types
	out := map[string]Offset{}
	ver := fmt.Sprintf("%d.%d", v.Info.Major, v.Info.Minor)
	tab := offsetTable[ver]
	for _, k := range OffsetKeys {
		if btf != nil {
			var val uint64
			var err error
			if len(k) > 7 && k[:7] == "sizeof(" {
				val, err = btf.Size(k[7 : len(k)-1])
			} else {
				val, err = btf.Offset(k)
			}
			if err == nil {
				out[k] = Offset{Value: val, Source: btf.Origin()}
				continue
			}
		}
		if val, ok := tab[k]; ok {
			out[k] = Offset{Value: val, Source: "table " + ver}
			continue
		}
		out[k] = Offset{}
	}
	return out
}
