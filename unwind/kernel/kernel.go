// Package kernel unwinds the kernel stacks in an arm64 Linux vmcore the
// way the kernel that wrote it unwinds them (arch/arm64/kernel/stacktrace.c
// of that version): the stopped CPUs from their dumped registers, across
// the per-CPU IRQ stack and the exception boundary into the interrupted
// task, down to the task's final frame; and blocked tasks from their
// cpu_context (stack_trace_save_tsk).
//
// The rules are picked from the kernel version in VMCOREINFO ([fp.ABIFor]):
// up to 6.12 a task's stack ends at the frame record inside its pt_regs
// (fp == &task_pt_regs(task)->stackframe: EL0 entry zeroes it, EL1 entry
// writes a synthetic {x29, elr} that the walk follows across the exception
// boundary); 6.13 introduced meta frame records (FINAL and PT_REGS types).
// The walk itself is package fp's, the module's one frame-pointer
// unwinder ([fp.ABIFinalRecord], [fp.ABIMetaRecord], with the pt_regs
// layout read from BTF): this package finds the stacks, reads their bytes
// from the dump once and hands them to it ([Walk.Config]). The BTF's type
// of pt_regs.stackframe confirms the version's choice (a struct
// frame_record_meta or a plain record) and decides where they differ.
// Both ABIs are checked against real kernels (testdata/kernel): the older
// on Debian's 6.1 and 6.12, meta records on Debian sid's 7.2, whose
// printed traces also say where each frame came from ("P": the pc of the
// pt_regs behind a PT_REGS meta record; "T": a blocked task's saved pc),
// and the FP walk's origins agree.
//
// Where a stopped CPU's caller's return address is comes from the code of
// the function before its pc ([Kernel.PrologueAt], the analysis of
// internal/prologue): until the prologue links its frame record
// (`mov x29, sp`) it is only in x30, after ftrace's NOPs, paciasp, the
// SCS push (`str x30, [x18], #8`) and the `stp x29, x30` alike, and both
// techniques report x30 after the pc (the SCS copy only while the push
// has not run; after it, it is the SCS's newest entry); the walk's Notes
// name the deciding instructions. The shipped SCS captures stop after a
// push once each (stop "x30"), and gdb's DWARF CFI backtrace at every
// stop is a second reference for the FP walk (testdata/kernel/README.md).
// On kernels with shadow call stacks, [Kernel.Compare] explains each
// frame only one technique has by a rule of the model.
//
// Structure offsets come from the kernel's BTF in the dump (found through
// __start_BTF/__stop_BTF or, for kernels whose kallsyms lacks data
// symbols, by its header in the image after _etext), or, for a dump
// without BTF, from the vmlinux's DWARF ([Options.Types]); per-CPU data
// from __per_cpu_offset; and every choice is listed in [Kernel.Notes].
// Frames in a loaded module are named from the module list and each
// module's own symbol table in the dump ([Kernel.Modules]), printed as
// the kernel prints them, "func+0xoff/0xsize [mod]".
//
// # What a live walk promises
//
// A live kernel (/proc/kcore, [vmcore.Vmcore.Live]) changes while it is
// read. A task walk of it ([Kernel.TaskWalkLive]) reads the task's
// cpu_context, its context-switch counts (nvcsw + nivcsw, incremented
// each time the task is switched out) and its on_cpu flag, then the
// stack, then all of them again, and then the frame records the walk
// used once more. The walk is Consistent only when the task was on no
// CPU at both reads and the context, the counts and every record used
// are unchanged: a task that is not on a CPU and is not switched out in
// between did not run in between (to run it is switched in, which sets
// on_cpu, and out, which counts), so its own stack did not change and
// the frames are those of one moment, the moment it last blocked.
// Otherwise the walk is repeated, at most DefaultLiveAttempts times, and
// the last attempt is reported with what differed on each. A task on a
// CPU is never Consistent: its cpu_context is stale (written when it last
// blocked) and its stack changes under the reader, so its frames, like
// the kernel's own /proc/PID/stack of a running task, are of no one
// moment; it is reported OnCPU. Nothing is promised across tasks: each
// is consistent on its own, at its own moment. Checked against the
// kernel's /proc/PID/stack inside Debian's 6.1 and 6.12 guests
// (testdata/kernel/kcore.sh, TestKcoreResults).
package kernel

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// Options adjusts what New derives.
type Options struct {
	// Current gives each CPU's current task (the task_struct address in
	// SP_EL0, e.g. from a debugger's register dump) for kernels whose
	// symbols lack the per-CPU __entry_task. 0 entries are unknown.
	Current []uint64
	// BTFAt and BTFSize give where the BTF is, skipping the search.
	BTFAt, BTFSize uint64
	// BTF, when set, is used instead of reading the dump's own: the BTF
	// of another dump of the same kernel build (BTFFrom names it; New
	// checks that OSRELEASE and BUILD-ID agree when BTFBuild is set).
	BTF      *vmcore.BTF
	BTFFrom  string
	BTFBuild string
	// Types, when set, gives the structure offsets of a dump with no BTF
	// (none found, or unreadable): the DWARF of the kernel's vmlinux
	// (unwind/debuginfo's File.Types) of the same build. BTF wins when
	// both are there.
	Types vmcore.Types
}

// Kernel is a vmcore prepared for unwinding.
type Kernel struct {
	// V is the dump.
	V *vmcore.Vmcore
	// Syms are the kernel's symbols, sorted by address.
	Syms []vmcore.KSym
	// ABI is the frame-record ABI of the dump's kernel version.
	ABI fp.ABI
	// BTF is the kernel's type information (nil if none was found).
	BTF *vmcore.BTF
	// Types is where the structure offsets come from: BTF, else
	// Options.Types, else nil (only the per-version table then).
	Types vmcore.Types
	// BTFAt and BTFSize are where the BTF was read.
	BTFAt, BTFSize uint64
	// Regs is the layout of struct pt_regs.
	Regs fp.PtRegsLayout
	// ThreadSize is THREAD_SIZE (and IRQ_STACK_SIZE).
	ThreadSize uint64
	// PerCPU is __per_cpu_offset[cpu] (nil when the symbol is unknown).
	PerCPU []uint64
	// Notes says what was applied and where each value came from.
	Notes []string

	off  map[string]uint64
	opts Options
	sym  map[string]uint64
	// mem is what the walks and the code checks read: V (tests overlay it).
	mem Memory
	// owners are {task->stack, task} of the task list, read once
	// (owned) for stackOwner; ownersErr is the task list's error.
	owned     bool
	owners    [][2]uint64
	ownersErr error
	// mods are the loaded modules (Modules), read once.
	modOnce sync.Once
	mods    []Module
	modsErr error
}

// keys read from BTF besides vmcore.OffsetKeys.
var taskKeys = []string{"task_struct.tasks", "task_struct.pid", "task_struct.comm", "task_struct.__state"}

// New prepares v for unwinding with the symbols syms (from /proc/kallsyms
// text or the dump's own tables).
func New(v *vmcore.Vmcore, syms []vmcore.KSym, opts Options) (*Kernel, error) {
	if !v.HasInfo {
		return nil, fmt.Errorf("%s: no VMCOREINFO: kernel version and layout unknown", v.Path)
	}
	k := &Kernel{V: v, Syms: syms, opts: opts, off: map[string]uint64{}, sym: make(map[string]uint64, len(syms)), mem: v}
	for _, s := range syms {
		if _, ok := k.sym[s.Name]; !ok && s.Module == "" {
			k.sym[s.Name] = s.Addr
		}
	}
	in := &v.Info
	k.ABI = fp.ABIFor(in.Major, in.Minor)
	k.note("kernel %s: unwinder rules %s", in.OSRelease, k.ABI)
	abiAt := len(k.Notes) // the BTF's word on the rules is noted after the version's
	k.note("PAC strip: %s (KERNELPACMASK %#x)", "kernel half of the dump's layout", in.KernelPACMask)
	k.note("page tables: %s", v.Translation())
	// THREAD_SHIFT is max(14 + KASAN_THREAD_SHIFT, PAGE_SHIFT) with
	// VMAP_STACK (asm/memory.h); KASAN is not detected here.
	k.ThreadSize = max(16<<10, in.PageSize)
	k.note("THREAD_SIZE %#x (14-bit minimum or the page size; KASAN kernels double it)", k.ThreadSize)
	if opts.BTF != nil {
		if opts.BTFBuild != "" && opts.BTFBuild != buildOf(v) {
			return nil, fmt.Errorf("%s: BTF from %s is of build %q, this dump is %q", v.Path, opts.BTFFrom, opts.BTFBuild, buildOf(v))
		}
		k.BTF = opts.BTF
		k.note("BTF from %s (same build %s)", opts.BTFFrom, buildOf(v))
	} else if err := k.loadBTF(); err != nil {
		k.note("BTF: %v", err)
	}
	if k.BTF != nil {
		k.Types = k.BTF
	} else if opts.Types != nil {
		k.Types = opts.Types
		k.note("structure offsets from %s (no BTF)", opts.Types.Origin())
	}
	offs := v.Offsets(k.Types)
	for _, key := range vmcore.OffsetKeys {
		o := offs[key]
		if o.Source != "" {
			k.off[key] = o.Value
		}
	}
	if k.Types != nil {
		for _, key := range append(append(taskKeys[:len(taskKeys):len(taskKeys)], liveKeys...), threadKeys...) {
			if o, err := k.Types.Offset(key); err == nil {
				k.off[key] = o
			}
		}
	}
	if k.BTF != nil {
		k.abiFromBTF(abiAt)
	}
	need := []string{"pt_regs.regs", "pt_regs.pc", "pt_regs.stackframe", "sizeof(pt_regs)"}
	for _, key := range need {
		if _, ok := k.off[key]; !ok {
			return nil, fmt.Errorf("%s: %s unknown (no BTF and no table for %d.%d)", v.Path, key, in.Major, in.Minor)
		}
	}
	k.Regs = fp.PtRegsLayout{Size: k.off["sizeof(pt_regs)"], X29: k.off["pt_regs.regs"] + 29*8, PC: k.off["pt_regs.pc"], StackFrame: k.off["pt_regs.stackframe"]}
	k.note("pt_regs: size %d, stackframe at %d, pc at %d (from %s)", k.Regs.Size, k.Regs.StackFrame, k.Regs.PC, offs["pt_regs.stackframe"].Source)
	if len(v.CPUs) == 0 && v.Virtual {
		k.note("per-CPU offsets not read: /proc/kcore holds no CPU's registers, tasks are walked from their cpu_context")
	} else if pc, err := v.PerCPUOffsets(syms, len(v.CPUs)); err == nil {
		k.PerCPU = pc
		k.note("per-CPU offsets from __per_cpu_offset")
	} else {
		k.note("per-CPU offsets unknown: %v", err)
	}
	return k, nil
}

// abiFromBTF checks the version's rules against the kernel's own type of
// pt_regs.stackframe: a struct frame_record_meta (a member type, 6.13's
// meta records: fp.ABIMetaRecord) or a u64[2] frame record (up to 6.12:
// fp.ABIFinalRecord). Where the BTF says otherwise (a kernel whose
// version misleads, e.g. a backport), the BTF decides. The note goes
// after the version's (at index at of Notes).
func (k *Kernel) abiFromBTF(at int) {
	var abi fp.ABI
	var how string
	if _, err := k.BTF.Offset("pt_regs.stackframe.type"); err == nil {
		abi, how = fp.ABIMetaRecord, "pt_regs.stackframe is a struct frame_record_meta (it has a type)"
	} else if _, err := k.BTF.Offset("pt_regs.stackframe"); err == nil {
		abi, how = fp.ABIFinalRecord, "pt_regs.stackframe has no meta record type"
	} else {
		return
	}
	n := fmt.Sprintf("BTF: %s: rules %s, as the version says", how, abi)
	if abi != k.ABI {
		n = fmt.Sprintf("BTF: %s: rules %s, not the version's %s", how, abi, k.ABI)
		k.ABI = abi
	}
	k.Notes = append(k.Notes[:at], append([]string{n}, k.Notes[at:]...)...)
}

// MergeDataSyms adds to syms the data symbols of extra (types D, B, R in
// either case, at or above _etext) that syms lacks: a kernel built
// without CONFIG_KALLSYMS_ALL lists no data symbols in /proc/kallsyms, and
// vmlinux's (nm) can supply them without changing any function's size.
func MergeDataSyms(syms, extra []vmcore.KSym) []vmcore.KSym {
	have := make(map[string]bool, len(syms)+len(extra)/4)
	var etext uint64
	for _, s := range syms {
		have[s.Name] = true
		if s.Name == "_etext" {
			etext = s.Addr
		}
	}
	if etext == 0 {
		return syms
	}
	out := append([]vmcore.KSym(nil), syms...)
	for _, s := range extra {
		switch s.Type {
		case 'D', 'd', 'B', 'b', 'R', 'r':
		default:
			continue
		}
		if !have[s.Name] && s.Addr >= etext {
			have[s.Name] = true
			out = append(out, s)
		}
	}
	vmcore.SortSizes(out)
	return out
}

// buildOf identifies a kernel build: OSRELEASE and BUILD-ID.
func buildOf(v *vmcore.Vmcore) string {
	return v.Info.OSRelease + " " + v.Info.Raw["BUILD-ID"]
}

// Build identifies the kernel build of the dump (OSRELEASE and the
// BUILD-ID of VMCOREINFO): dumps of one build share their BTF.
func (k *Kernel) Build() string { return buildOf(k.V) }

func (k *Kernel) note(format string, args ...any) {
	k.Notes = append(k.Notes, fmt.Sprintf(format, args...))
}

// maxBTFScan bounds the search for the BTF header after _etext.
const maxBTFScan = 96 << 20

func (k *Kernel) loadBTF() error {
	v := k.V
	if k.opts.BTFAt != 0 {
		k.BTFAt, k.BTFSize = k.opts.BTFAt, k.opts.BTFSize
	} else if s, ok1 := k.sym["__start_BTF"]; ok1 {
		e, ok2 := k.sym["__stop_BTF"]
		if !ok2 || e <= s {
			return fmt.Errorf("__stop_BTF missing or below __start_BTF")
		}
		k.BTFAt, k.BTFSize = s, e-s
		k.note("BTF at __start_BTF %#x, %d bytes", s, e-s)
	} else {
		at, size, err := k.scanBTF()
		if err != nil {
			return err
		}
		k.BTFAt, k.BTFSize = at, size
		k.note("BTF found by its header at %#x (%d bytes): __start_BTF is not among the symbols", at, size)
	}
	// ReadBTF bounds the size (64 MiB and the dump's size) before
	// allocating, and names the dump and the address in its errors.
	t, err := v.ReadBTF(k.BTFAt, k.BTFSize)
	if err != nil {
		return err
	}
	k.BTF = t
	return nil
}

// scanBTF looks for the BTF header (magic 0xeb9f, version 1, flags 0,
// header length 24) at 4-byte steps in the kernel image after _etext,
// where .BTF sits in the read-only data.
func (k *Kernel) scanBTF() (uint64, uint64, error) {
	start, ok := k.sym["_etext"]
	if !ok {
		return 0, 0, fmt.Errorf("neither __start_BTF nor _etext among the symbols")
	}
	ps := k.V.Info.PageSize
	page := make([]byte, ps)
	le := binary.LittleEndian
	for va := start &^ (ps - 1); va < start+maxBTFScan; va += ps {
		if k.V.ReadVirt(page, va) != nil {
			continue
		}
		for o := uint64(0); o+24 <= ps; o += 4 {
			if le.Uint64(page[o:]) != 0x000000180001eb9f {
				continue
			}
			var h [24]byte
			if k.V.ReadVirt(h[:], va+o) != nil {
				continue
			}
			typOff, typLen := uint64(le.Uint32(h[8:])), uint64(le.Uint32(h[12:]))
			strOff, strLen := uint64(le.Uint32(h[16:])), uint64(le.Uint32(h[20:]))
			size := 24 + max(typOff+typLen, strOff+strLen)
			if size > 24 && size <= maxBTFScan {
				return va + o, size, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("no BTF header within %d MiB after _etext", maxBTFScan>>20)
}

func (k *Kernel) read64(va uint64) (uint64, error) {
	var b [8]byte
	if err := k.mem.ReadVirt(b[:], va); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (k *Kernel) percpu(name string, cpu int) (uint64, error) {
	a, ok := k.sym[name]
	if !ok {
		return 0, fmt.Errorf("%s is not among the symbols", name)
	}
	if k.PerCPU == nil || cpu < 0 || cpu >= len(k.PerCPU) {
		return 0, fmt.Errorf("per-CPU offset of cpu %d unknown", cpu)
	}
	return a + k.PerCPU[cpu], nil
}

// Current returns the task running on cpu: per_cpu(__entry_task, cpu)
// (arch/arm64/kernel/process.c), or Options.Current (SP_EL0), or else the
// task of the task list whose stack holds the CPU's sp. The dump's
// NT_PRSTATUS pr_pid is not used: QEMU writes the CPU index + 1 there.
func (k *Kernel) Current(cpu int) (uint64, string, error) {
	if a, err := k.percpu("__entry_task", cpu); err == nil {
		t, err := k.read64(a)
		return t, "per_cpu(__entry_task)", err
	}
	if cpu >= 0 && cpu < len(k.opts.Current) && k.opts.Current[cpu] != 0 {
		t := k.opts.Current[cpu]
		// In the kernel SP_EL0 holds current; from EL0, and in the
		// vectors before kernel_entry switches it, it is the user sp.
		if t < k.V.PageOffset {
			return 0, "", fmt.Errorf("current task of cpu %d unknown: SP_EL0 %#x is no kernel address (the CPU was in or just left EL0)", cpu, t)
		}
		return t, "SP_EL0 given by the caller", nil
	}
	t, err := k.stackOwner(cpu)
	if err != nil {
		return 0, "", fmt.Errorf("current task of cpu %d unknown: no __entry_task symbol, no SP_EL0 given, and %v", cpu, err)
	}
	return t, "the task whose stack holds the CPU's sp (task list)", nil
}

// stackOwner returns the task of the task list whose stack holds cpu's
// sp: the CPU runs on that task's stack, so it is its current task. The
// stacks of the task list are read once.
func (k *Kernel) stackOwner(cpu int) (uint64, error) {
	if cpu < 0 || cpu >= len(k.V.CPUs) {
		return 0, fmt.Errorf("no cpu %d", cpu)
	}
	if !k.owned {
		k.owned = true
		ts, err := k.Tasks(0)
		k.ownersErr = err
		for _, t := range ts {
			if s, err := k.TaskStack(t.Addr); err == nil {
				k.owners = append(k.owners, [2]uint64{s.Low, t.Addr})
			}
		}
	}
	sp := k.V.CPUs[cpu].Regs.SP
	for _, o := range k.owners {
		if sp >= o[0] && sp-o[0] < k.ThreadSize {
			return o[1], nil
		}
	}
	if k.ownersErr != nil {
		return 0, fmt.Errorf("sp %#x is on no stack of the task list (%d tasks read: %v)", sp, len(k.owners), k.ownersErr)
	}
	return 0, fmt.Errorf("sp %#x is on no stack of the task list's %d tasks (an IRQ stack, or an idle task, which the list lacks)", sp, len(k.owners))
}

// typeOffset returns a member offset (or "sizeof(name)") of any kernel
// structure: from the offsets New derived, else from the Types.
func (k *Kernel) typeOffset(key string) (uint64, error) {
	if o, ok := k.off[key]; ok {
		return o, nil
	}
	if k.Types == nil {
		return 0, fmt.Errorf("offset %s unknown (no BTF)", key)
	}
	if len(key) > 7 && key[:7] == "sizeof(" && key[len(key)-1] == ')' {
		return k.Types.Size(key[7 : len(key)-1])
	}
	return k.Types.Offset(key)
}

func (k *Kernel) offset(key string) (uint64, error) {
	o, ok := k.off[key]
	if !ok {
		return 0, fmt.Errorf("offset %s unknown (no BTF)", key)
	}
	return o, nil
}

// TaskStack returns task->stack's bounds.
func (k *Kernel) TaskStack(task uint64) (Stack, error) {
	o, err := k.offset("task_struct.stack")
	if err != nil {
		return Stack{}, err
	}
	s, err := k.read64(task + o)
	if err != nil {
		return Stack{}, fmt.Errorf("task %#x: stack: %w", task, err)
	}
	if s == 0 || s%k.ThreadSize != 0 {
		return Stack{}, fmt.Errorf("task %#x: stack %#x is not THREAD_SIZE aligned", task, s)
	}
	return Stack{Low: s, High: s + k.ThreadSize, Kind: fp.Task, How: "task->stack (btf)"}, nil
}

// CPUStacks returns the stacks the kernel lets an unwind of cpu's current
// task use: the task stack, the CPU's IRQ stack, its overflow stack and
// its SDEI stacks (those the symbols give), and says where each came from.
func (k *Kernel) CPUStacks(cpu int, task uint64) ([]Stack, error) {
	ts, err := k.TaskStack(task)
	if err != nil {
		return nil, err
	}
	out := []Stack{ts}
	sp := k.V.CPUs[cpu].Regs.SP
	if a, err := k.percpu("irq_stack_ptr", cpu); err == nil {
		p, err := k.read64(a)
		if err != nil {
			return nil, fmt.Errorf("irq_stack_ptr of cpu %d: %w", cpu, err)
		}
		out = append(out, Stack{Low: p, High: p + k.ThreadSize, Kind: fp.IRQ, How: "per_cpu(irq_stack_ptr)"})
	} else if sp < ts.Low || sp >= ts.High {
		lo := sp &^ (k.ThreadSize - 1)
		out = append(out, Stack{Low: lo, High: lo + k.ThreadSize, Kind: fp.IRQ,
			How: "inferred: the THREAD_SIZE-aligned block holding sp, off the task stack (irq_stack_ptr: " + err.Error() + ")"})
	}
	if a, err := k.percpu("overflow_stack", cpu); err == nil {
		out = append(out, Stack{Low: a, High: a + 4096, Kind: fp.Overflow, How: "per_cpu(overflow_stack)"})
	}
	for _, s := range []struct {
		name string
		kind fp.StackKind
	}{{"sdei_stack_normal_ptr", fp.SDEINormal}, {"sdei_stack_critical_ptr", fp.SDEICritical}} {
		if a, err := k.percpu(s.name, cpu); err == nil {
			if p, err := k.read64(a); err == nil && p != 0 {
				out = append(out, Stack{Low: p, High: p + k.ThreadSize, Kind: s.kind, How: "per_cpu(" + s.name + ")"})
			}
		}
	}
	return out, nil
}

// CPUWalk is the walk of cpu from its dumped registers, PACs stripped
// with the dump's layout. Where the code of the function holding pc says
// the caller's return address is still only in x30 ([Kernel.PrologueAt]:
// X30Live, e.g. a stop at its first instruction, after ftrace's NOPs,
// paciasp, the SCS push or the stp x29, x30, before the mov x29, sp that
// links the record), x30 is reported second (fp.OriginLR). The walk's Notes
// name the instructions that decided, or why it could not be decided
// (x30 is then not reported).
func (k *Kernel) CPUWalk(cpu int) (*Walk, error) {
	if cpu < 0 || cpu >= len(k.V.CPUs) {
		return nil, fmt.Errorf("%s: no cpu %d", k.V.Path, cpu)
	}
	task, how, err := k.Current(cpu)
	if err != nil {
		return nil, err
	}
	stacks, err := k.CPUStacks(cpu, task)
	if err != nil {
		return nil, err
	}
	r := &k.V.CPUs[cpu].Regs
	w := &Walk{Mem: k.mem, ABI: k.ABI, Regs: k.Regs, Stacks: stacks, TaskPtRegs: fp.TaskPtRegsAddr(stacks[0].High, k.Regs),
		FP: r.X[29], PC: r.PC, Start: fp.OriginStopPC, Layout: k.V.Layout}
	k.note("cpu %d: current task %#x (%s)", cpu, task, how)
	w.Notes = append(w.Notes, fmt.Sprintf("cpu %d: current task %#x (%s)", cpu, task, how))
	p, err := k.PrologueAt(r.PC)
	switch {
	case err != nil:
		w.Notes = append(w.Notes, fmt.Sprintf("cpu %d: x30 %#x not reported: whether it is the caller's return address is unknown: %v", cpu, r.X[30], err))
	case p.X30 == X30Live:
		w.LR = r.X[30]
		w.Notes = append(w.Notes, fmt.Sprintf("cpu %d: x30 %#x reported second, the caller's return address not yet in a linked frame record: %s", cpu, r.X[30], p))
	case p.X30 == X30Linked:
		w.Notes = append(w.Notes, fmt.Sprintf("cpu %d: x30 not reported: %s", cpu, p))
	default:
		w.Notes = append(w.Notes, fmt.Sprintf("cpu %d: x30 %#x not reported: whether it is the caller's return address is unknown: %s", cpu, r.X[30], p))
	}
	return w, nil
}

// Task is a task of the dump's task list.
type Task struct {
	// Addr is the task_struct's address.
	Addr uint64
	// PID is task->pid (the thread id); TGID is task->tgid (the
	// process id; PID when BTF lacks it).
	PID, TGID int
	// Comm is task->comm.
	Comm string
	// State is task->__state.
	State uint64
	// FP, SP and PC are its cpu_context (thread_saved_fp/sp/pc).
	FP, SP, PC uint64
}

// maxTasks bounds the task list walk.
const maxTasks = 1 << 16

// Tasks walks the task list (task_struct.tasks) from init_task (or from
// start when init_task is not among the symbols, or, in /proc/kcore, from
// the reader's own task_struct that its NT_TASKSTRUCT note copies). The
// list holds the thread-group leaders: [Kernel.Threads] adds the other
// threads.
func (k *Kernel) Tasks(start uint64) ([]Task, error) {
	if a, ok := k.sym["init_task"]; ok {
		start = a
	}
	if start == 0 && k.V.TaskStruct != nil {
		if o, err := k.offset("task_struct.tasks"); err == nil && o+8 <= uint64(len(k.V.TaskStruct)) {
			// The reader's tasks.next is the next leader's &tasks: the
			// list is a ring, so it reaches every leader.
			if n := binary.LittleEndian.Uint64(k.V.TaskStruct[o:]); n > o {
				start = n - o
			}
		}
	}
	if start == 0 {
		return nil, fmt.Errorf("%s: init_task is not among the symbols and no task given", k.V.Path)
	}
	tasksOff, err := k.offset("task_struct.tasks")
	if err != nil {
		return nil, err
	}
	var out []Task
	seen := map[uint64]bool{}
	for t := start; !seen[t]; {
		if len(out) >= maxTasks {
			return out, fmt.Errorf("%s: more than %d tasks", k.V.Path, maxTasks)
		}
		seen[t] = true
		task, err := k.readTask(t)
		if err != nil {
			return out, err
		}
		out = append(out, task)
		next, err := k.read64(t + tasksOff)
		if err != nil {
			return out, fmt.Errorf("task %#x: tasks.next: %w", t, err)
		}
		t = next - tasksOff
	}
	return out, nil
}

// readTask reads the task_struct at t: pid, tgid, comm, __state and its
// cpu_context.
func (k *Kernel) readTask(t uint64) (Task, error) {
	var offs [4]uint64
	for i, key := range taskKeys {
		o, err := k.offset(key)
		if err != nil {
			return Task{}, err
		}
		offs[i] = o
	}
	ctx, err := k.offset("task_struct.thread.cpu_context")
	if err != nil {
		return Task{}, err
	}
	cfp, cpc, csp := k.off["cpu_context.fp"], k.off["cpu_context.pc"], k.off["cpu_context.sp"]
	task := Task{Addr: t}
	var b [16]byte
	if err := k.mem.ReadVirt(b[:4], t+offs[1]); err != nil {
		return task, fmt.Errorf("task %#x: pid: %w", t, err)
	}
	task.PID = int(int32(binary.LittleEndian.Uint32(b[:])))
	task.TGID = task.PID
	if o, ok := k.off["task_struct.tgid"]; ok {
		if err := k.mem.ReadVirt(b[:4], t+o); err != nil {
			return task, fmt.Errorf("task %#x: tgid: %w", t, err)
		}
		task.TGID = int(int32(binary.LittleEndian.Uint32(b[:])))
	}
	if err := k.mem.ReadVirt(b[:], t+offs[2]); err != nil {
		return task, fmt.Errorf("task %#x: comm: %w", t, err)
	}
	n := 0
	for n < 16 && b[n] != 0 {
		n++
	}
	task.Comm = string(b[:n])
	if err := k.mem.ReadVirt(b[:4], t+offs[3]); err != nil {
		return task, fmt.Errorf("task %#x: __state: %w", t, err)
	}
	task.State = uint64(binary.LittleEndian.Uint32(b[:]))
	for _, f := range []struct {
		dst *uint64
		off uint64
	}{{&task.FP, cfp}, {&task.SP, csp}, {&task.PC, cpc}} {
		if *f.dst, err = k.read64(t + ctx + f.off); err != nil {
			return task, fmt.Errorf("task %#x: cpu_context: %w", t, err)
		}
	}
	return task, nil
}

// RunningOn returns the CPU whose current task ([Kernel.Current]) is the
// task_struct at task, or -1 when it is current on none (or no CPU's
// current task is known). The dump's NT_PRSTATUS pr_pid is never used:
// QEMU writes the CPU index + 1 there, not a pid.
func (k *Kernel) RunningOn(task uint64) int {
	for c := range k.V.CPUs {
		if cur, _, err := k.Current(c); err == nil && cur == task {
			return c
		}
	}
	return -1
}

// pstateEL is the exception level field of PSTATE (SPSR M[3:2]).
func pstateEL(pstate uint64) uint64 { return pstate >> 2 & 3 }

// TaskWalk is stack_trace_save_tsk's walk of a task that is not running:
// from its cpu_context, on its own stack only. A task that is current on
// a CPU ([Kernel.RunningOn]) has a stale cpu_context (written when it was
// last switched out): it is walked from that CPU's registers instead
// ([Kernel.CPUWalk], its Notes say so), and when that CPU was in user
// mode (PSTATE EL0) there is no kernel frame to walk: an error says so.
func (k *Kernel) TaskWalk(t Task) (*Walk, error) {
	if c := k.RunningOn(t.Addr); c >= 0 {
		if r := &k.V.CPUs[c].Regs; pstateEL(r.Pstate) == 0 {
			return nil, fmt.Errorf("%s: task %#x (pid %d %s) is running in user mode on cpu %d (pstate %#x, pc %#x): no kernel frames, and its cpu_context is stale",
				k.V.Path, t.Addr, t.PID, t.Comm, c, r.Pstate, r.PC)
		}
		w, err := k.CPUWalk(c)
		if err != nil {
			return nil, fmt.Errorf("task %#x (pid %d %s), current on cpu %d: %w", t.Addr, t.PID, t.Comm, c, err)
		}
		w.Notes = append(w.Notes, fmt.Sprintf("task %#x (pid %d %s) is current on cpu %d: walked from the CPU's registers, not its stale cpu_context (pc %#x, fp %#x)", t.Addr, t.PID, t.Comm, c, t.PC, t.FP))
		return w, nil
	}
	s, err := k.TaskStack(t.Addr)
	if err != nil {
		return nil, err
	}
	return &Walk{Mem: k.mem, ABI: k.ABI, Regs: k.Regs, Stacks: []Stack{s}, TaskPtRegs: fp.TaskPtRegsAddr(s.High, k.Regs),
		FP: t.FP, PC: t.PC, Start: fp.OriginTask, Layout: k.V.Layout}, nil
}

// Sym returns the symbol holding pc: the last at or below it (the first
// of several at one address, as kallsyms picks). A pc outside the kernel
// image's text [_stext, _etext) that is in a loaded module's memory
// ([Kernel.Modules], read from the dump) is named from that module's own
// symbol table, as the kernel's kallsyms_lookup names it (KSym.Module
// set), whatever the symbols given to New say.
func (k *Kernel) Sym(pc uint64) (vmcore.KSym, bool) {
	st, ok1 := k.sym["_stext"]
	et, ok2 := k.sym["_etext"]
	if !ok1 || !ok2 || pc < st || pc >= et {
		if s, ok, in := k.moduleSym(pc); in {
			return s, ok
		}
	}
	i := sort.Search(len(k.Syms), func(i int) bool { return k.Syms[i].Addr > pc }) - 1
	if i < 0 {
		return vmcore.KSym{}, false
	}
	for i > 0 && k.Syms[i-1].Addr == k.Syms[i].Addr {
		i--
	}
	s := k.Syms[i]
	if s.Size != 0 && pc-s.Addr >= s.Size {
		return vmcore.KSym{}, false
	}
	return s, true
}

// Format returns pc as the kernel prints it (%pS): function+0xoff/0xsize,
// followed by " [module]" for a module's function.
func (k *Kernel) Format(pc uint64) string {
	s, ok := k.Sym(pc)
	if !ok {
		return fmt.Sprintf("%#x", pc)
	}
	return symString(s, pc)
}

func symString(s vmcore.KSym, pc uint64) string {
	if s.Module != "" {
		return fmt.Sprintf("%s+%#x/%#x [%s]", s.Name, pc-s.Addr, s.Size, s.Module)
	}
	return fmt.Sprintf("%s+%#x/%#x", s.Name, pc-s.Addr, s.Size)
}

// FormatBacktrace returns a return address as the kernel prints it with
// %pB (lib/vsprintf.c, sprint_backtrace): the symbol of pc-1, so that a
// call at the very end of a function (a noreturn call) names the
// caller, with the offset of pc.
func (k *Kernel) FormatBacktrace(pc uint64) string {
	if pc == 0 {
		return k.Format(pc)
	}
	s, ok := k.Sym(pc - 1)
	if !ok {
		return fmt.Sprintf("%#x", pc)
	}
	return symString(s, pc)
}
