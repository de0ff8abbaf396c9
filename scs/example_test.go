package scs_test

import (
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/scs"
)

// A task calls two functions, an IRQ arrives, the handler calls one more;
// Save copies the IRQ's entry, the interrupted PC and the task's entries.
func ExampleModel() {
	m, err := scs.New(scs.Config{Policy: scs.PerCPU, KeepInterruptedPC: true},
		scs.Allocator(&mem.Memory{}, 0xffff800010000000))
	if err != nil {
		panic(err)
	}
	m.Push(0, 0xffff800080001000) // return into the task's outer function
	m.Push(0, 0xffff800080002000) // return into the task's inner function
	m.EnterIRQ(0, 0, 0xffff800080003000)
	m.Push(0, 0xffff800080004000) // return into the IRQ entry code

	store := make([]uint64, 8)
	n, err := m.Save(0, store, 0)
	fmt.Println(err)
	for _, pc := range store[:n] {
		fmt.Printf("%#x\n", pc)
	}
	// Output:
	// <nil>
	// 0xffff800080004000
	// 0xffff800080003000
	// 0xffff800080002000
	// 0xffff800080001000
}

// Frames tags each frame with its context and source, for explanations.
func ExampleFrames() {
	m, _ := scs.New(scs.Config{Policy: scs.ThreadInfo, KeepInterruptedPC: true},
		scs.Allocator(&mem.Memory{}, 0xffff800010000000))
	m.Push(0, 0xffff800080001000)
	m.EnterSDEI(0, true, 0, 0xffff800080002000)
	m.Push(0, 0xffff800080003000)

	v, _ := m.View(0)
	frames := make([]scs.Frame, 8)
	n, _ := scs.Frames(&v, frames, 0)
	for _, f := range frames[:n] {
		fmt.Printf("%#x %-13s %s\n", f.PC, f.Context, f.Source)
	}
	// Output:
	// 0xffff800080003000 sdei-critical scs
	// 0xffff800080002000 task          interrupted pc
	// 0xffff800080001000 task          scs
}

// Under the on-stack policy the task's x18 is on the interrupted stack:
// an SCS-only unwinder stops at the boundary and says so.
func ExampleSave_hiddenTop() {
	var memory mem.Memory
	stack, _ := mem.NewRegion("task stack", "task", 0xffff800008000000, 16384)
	memory.Add(stack)
	m, _ := scs.New(scs.Config{Policy: scs.OnStack, Mem: &memory},
		scs.Allocator(&memory, 0xffff800010000000))
	m.Push(0, 0xffff800080001000)
	m.EnterIRQ(0, stack.End()-16, 0xffff800080002000) // stp x18, xzr, [sp, #-16]!
	m.Push(0, 0xffff800080003000)

	store := make([]uint64, 8)
	n, err := m.Save(0, store, 0)
	fmt.Println(n, errors.Is(err, scs.ErrInterruptedTopHidden), errors.Is(err, scs.ErrCorrupt))
	// Output:
	// 1 true false
}

// A View of a shadow stack captured from a real program: one region, the
// captured x18, the program's VA layout. PACs are stripped.
func ExampleNewSnapshotView() {
	l := ptrauth.NewLayout(48, true)
	r, _ := mem.NewRegion("[anon:shadow call stack]", "scs", 0x7f0000000000, 64)
	r.Store(0x7f0000000000, 0x0000aaaaaaaa1234)
	r.Store(0x7f0000000008, 0x0012aaaaaaaa5678) // signed: PAC in bits 54:48
	v := scs.NewSnapshotView(r, 0x7f0000000000, 0x7f0000000010, l)

	store := make([]uint64, 4)
	n, err := scs.Save(&v, store, 0)
	fmt.Printf("%d %v %#x %#x\n", n, err, store[0], store[1])
	// Output:
	// 2 <nil> 0xaaaaaaaa5678 0xaaaaaaaa1234
}

// What each policy adds to IRQ entry and exit: the maintainer's "entry code
// must not pay for unwinding" as numbers.
func ExampleEntryCost() {
	for _, p := range scs.Policies {
		fmt.Printf("%-12s entry: %v; exit: %v\n", p,
			scs.EntryCost(p, scs.CtxIRQ, false), scs.ExitCost(p, scs.CtxIRQ, false))
	}
	// Output:
	// thread_info  entry: 1 load, 1 store, 6 insns; exit: 1 load, 0 stores, 2 insns
	// on-stack     entry: 1 load, 1 store, 5 insns; exit: 1 load, 0 stores, 1 insn
	// per-cpu      entry: 1 load, 1 store, 8 insns; exit: 1 load, 1 store, 8 insns
}

// Sequence lists the instructions being counted.
func ExampleSequence() {
	for _, l := range scs.Sequence(scs.PerCPU, scs.CtxIRQ, true, false) {
		fmt.Println(l)
	}
	// Output:
	// adrp x18, irq_shadow_call_stack_saved_ptr
	// add x18, x18, :lo12:irq_shadow_call_stack_saved_ptr
	// mrs x17, tpidr_el1
	// ldr x18, [x18, x17]	; load
	// adrp x15, irq_shadow_call_stack_saved_ptr
	// add x15, x15, :lo12:irq_shadow_call_stack_saved_ptr
	// mrs x17, tpidr_el1
	// str xzr, [x15, x17]	; store
}

func ExampleParsePolicy() {
	p, err := scs.ParsePolicy("per-cpu")
	fmt.Println(p, err)
	_, err = scs.ParsePolicy("percpu")
	fmt.Println(err)
	// Output:
	// per-cpu <nil>
	// scs: unknown policy "percpu" (want thread_info, on-stack or per-cpu)
}
