package machine

import (
	"fmt"
	"sort"

	"github.com/unwindkit/unwindkit/internal/arm64"
	"github.com/unwindkit/unwindkit/internal/mem"
)

// Func declares one modelled function and its shape. The zero shape is a
// compiled kernel C function: it calls other functions, pushes its return
// address on the shadow call stack (when the machine has one), signs it with
// paciasp (when the machine has PAC) and builds a frame record (when the
// machine keeps frame pointers).
type Func struct {
	Name string
	// Leaf functions call nothing: no prologue, the return address stays in
	// x30, neither the shadow call stack nor a frame record sees it.
	Leaf bool
	// NoPAC: not built with -mbranch-protection=pac-ret.
	NoPAC bool
	// NoSCS: built without -fsanitize=shadow-call-stack (or __noscs).
	NoSCS bool
	// NoFrame: built with -fomit-frame-pointer: x30 is saved on the stack
	// but no {fp, lr} record is linked into the chain.
	NoFrame bool
	// Locals is the size of the function's locals in bytes (rounded up to
	// 16); it sets the frame size.
	Locals int
	// Calls lists the functions this one has call sites for. Nil means a
	// call site for every declared (non-builtin) function.
	Calls []string
	// Kretprobe marks the function as kretprobed when the machine has
	// kretprobes on. With Config.Kretprobes and no function marked, every
	// non-builtin function is probed.
	Kretprobe bool
}

// Names of the built-in functions the machine adds to every text region.
// They model the kernel entry code and helpers that a real trace shows.
const (
	FnRetFromFork     = "ret_from_fork"          // asm: bottom of every task, blr x19
	FnIRQVector       = "el1h_64_irq"            // asm: vector, kernel_entry, bl handler
	FnIRQHandler      = "el1h_64_irq_handler"    // C: entry-common.c
	FnCallOnIRQStack  = "call_on_irq_stack"      // asm: switches stack and SCS, blr
	FnHandleIRQ       = "handle_arch_irq"        // C: base function of the IRQ context
	FnSDEIAsmHandler  = "__sdei_asm_handler"     // asm: switches stack and SCS, frame record
	FnSDEIHandler     = "__sdei_handler"         // C: base function of an SDEI context
	FnStackTraceSave  = "stack_trace_save"       // C: out-of-line unwinder invocation
	FnReturnToHandler = "return_to_handler"      // function-graph return trampoline
	FnKretprobeTramp  = "__kretprobe_trampoline" // kretprobe return trampoline
)

type fnKind uint8

const (
	kindC     fnKind = iota // compiled C: shape from Func and the machine
	kindAsm                 // hand-written asm: no SCS push, no PAC
	kindTramp               // trampoline: never called directly
)

// fn is a function placed in the text region.
type fn struct {
	spec    Func
	kind    fnKind
	addr    uint64
	size    uint64
	body    uint64            // first body instruction: the pc while it runs
	sites   map[string]uint64 // callee name -> address of its bl
	blr     uint64            // address of the blr, for asm that calls indirectly
	scs     bool              // pushes its return address on the SCS
	frame   bool              // builds a frame record
	pac     bool              // signs its return address
	frameSz uint64            // bytes the prologue takes off sp
	probed  bool              // kretprobed
	traced  bool              // function-graph traced
}

// text is the modelled kernel text: real A64 instructions in a region.
type text struct {
	region *mem.Region
	fns    []*fn // sorted by address
	byName map[string]*fn
}

func roundUp16(n int) uint64 { return uint64((n + 15) &^ 15) }

// entryCode returns f's entry instructions (its prologue), up to its body.
func entryCode(f *fn, fgraph bool) []uint32 {
	var code []uint32
	emit := func(w uint32) { code = append(code, w) }
	if fgraph && f.kind == kindC {
		// -fpatchable-function-entry=2: two NOPs that ftrace patches to
		// "mov x9, x30; bl ftrace_caller".
		emit(arm64.NOP)
		emit(arm64.NOP)
	}
	switch f.kind {
	case kindTramp:
		emit(arm64.NOP)
		emit(arm64.RET)
		return code
	case kindAsm:
		if f.frame {
			emit(arm64.StpPre(arm64.X29, arm64.X30, arm64.SP, -16))
			emit(arm64.AddImm(arm64.X29, arm64.SP, 0))
		}
	case kindC:
		if f.pac {
			emit(arm64.PACIASP)
		}
		if f.scs {
			emit(arm64.SCSPush())
		}
		if f.frame {
			emit(arm64.StpPre(arm64.X29, arm64.X30, arm64.SP, -int(f.frameSz)))
			emit(arm64.AddImm(arm64.X29, arm64.SP, 0))
		} else if !f.spec.Leaf {
			// str x30, [sp, #-N]!: the return address is saved, unlinked.
			emit(0xf8000c00 | uint32((-int(f.frameSz))&0x1ff)<<12 | arm64.SP<<5 | arm64.X30)
		}
	}
	return code
}

// layoutText places every function at base and encodes it.
func buildText(base uint64, fns []*fn, fgraph bool) (*text, error) {
	t := &text{byName: make(map[string]*fn, len(fns))}
	for _, f := range fns {
		if _, dup := t.byName[f.spec.Name]; dup {
			return nil, fmt.Errorf("machine: function %q declared twice", f.spec.Name)
		}
		t.byName[f.spec.Name] = f
	}
	// Pass 1: addresses. Each function: prologue, one body instruction, one
	// call site per callee, epilogue, ret; 16-byte aligned.
	pc := base
	type plan struct {
		pro     []uint32
		callees []string
	}
	plans := make([]plan, len(fns))
	for i, f := range fns {
		pro := entryCode(f, fgraph)
		callees := f.spec.Calls
		if f.spec.Leaf || f.kind == kindTramp {
			callees = nil
		}
		for _, c := range callees {
			if _, ok := t.byName[c]; !ok {
				return nil, fmt.Errorf("machine: function %q calls undeclared %q", f.spec.Name, c)
			}
		}
		plans[i] = plan{pro, callees}
		f.addr = pc
		f.body = pc + 4*uint64(len(pro))
		f.sites = make(map[string]uint64, len(callees))
		n := uint64(len(pro)) + 1
		for _, c := range callees {
			if _, dup := f.sites[c]; !dup {
				f.sites[c] = pc + 4*n
				n++
			}
		}
		if f.kind == kindAsm && f.spec.Name != FnIRQVector && f.spec.Name != FnSDEIAsmHandler {
			f.blr = pc + 4*n
			n++
		}
		n += uint64(len(epilogue(f))) + 1 // epilogue + brk padding guard
		f.size = 4 * n
		pc += (f.size + 15) &^ 15
	}
	region, err := mem.NewRegion("text", "text", base, (pc-base+4095)&^4095)
	if err != nil {
		return nil, err
	}
	t.region = region
	// Pass 2: encode.
	for i, f := range fns {
		at := f.addr
		put := func(w uint32) {
			region.Store32(at, w)
			at += 4
		}
		for _, w := range plans[i].pro {
			put(w)
		}
		put(arm64.MovReg(0, 0)) // the body: "mov x0, x0"
		seen := map[string]bool{}
		for _, c := range plans[i].callees {
			if seen[c] {
				continue
			}
			seen[c] = true
			w, err := arm64.BL(at, t.byName[c].addr)
			if err != nil {
				return nil, err
			}
			put(w)
		}
		if f.blr != 0 {
			reg := arm64.X16
			if f.spec.Name == FnRetFromFork {
				reg = 19
			} else if f.spec.Name == FnCallOnIRQStack {
				reg = 1
			}
			put(arm64.BLR(reg))
		}
		for _, w := range epilogue(f) {
			put(w)
		}
		put(arm64.BRK0)
	}
	t.fns = append([]*fn(nil), fns...)
	sort.Slice(t.fns, func(i, j int) bool { return t.fns[i].addr < t.fns[j].addr })
	return t, nil
}

func epilogue(f *fn) []uint32 {
	var code []uint32
	switch f.kind {
	case kindTramp:
		return nil
	case kindAsm:
		if f.frame {
			code = append(code, arm64.LdpPost(arm64.X29, arm64.X30, arm64.SP, 16))
		}
	case kindC:
		if f.frame {
			code = append(code, arm64.LdpPost(arm64.X29, arm64.X30, arm64.SP, int(f.frameSz)))
		} else if !f.spec.Leaf {
			// ldr x30, [sp], #N
			code = append(code, 0xf8400400|uint32(int(f.frameSz)&0x1ff)<<12|arm64.SP<<5|arm64.X30)
		}
		if f.scs {
			code = append(code, arm64.SCSPop())
		}
		if f.pac {
			code = append(code, arm64.AUTIASP)
		}
	}
	return append(code, arm64.RET)
}
