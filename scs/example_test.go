package scs_test

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/scs"
)

// A task calls two functions, an IRQ arrives, the handler calls one more;
// Save copies the IRQ's entry, the interrupted PC and the task's entries.
func ExampleModel() {
	m, err := scs.New(scs.Config{Policy: scs.PerCPU, KeepInterruptedPC: true},
		scs.NewAllocator(0xffff800010000000))
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

// Frames tags each frame with its context and origin, for explanations.
func ExampleFrames() {
	m, _ := scs.New(scs.Config{Policy: scs.ThreadInfo, KeepInterruptedPC: true},
		scs.NewAllocator(0xffff800010000000))
	m.Push(0, 0xffff800080001000)
	m.EnterSDEI(0, true, 0, 0xffff800080002000)
	m.Push(0, 0xffff800080003000)

	v, _ := m.View(0)
	for f, err := range scs.Frames(&v) {
		if err != nil {
			fmt.Println(err)
			break
		}
		fmt.Printf("%#x %-13s %s\n", f.PC, scs.ContextOf(f.Stack), f.Origin)
	}
	// Output:
	// 0xffff800080003000 sdei-critical scs
	// 0xffff800080002000 task          interrupted-pc
	// 0xffff800080001000 task          scs
}

// taskStack is the driver's normal stack for the on-stack example: the
// model stores the interrupted x18 there (Config.Mem).
type taskStack struct {
	base  uint64
	words [2048]uint64
}

func (s *taskStack) Load(addr uint64) (uint64, bool) {
	i := (addr - s.base) / 8
	if addr%8 != 0 || i >= uint64(len(s.words)) {
		return 0, false
	}
	return s.words[i], true
}

func (s *taskStack) Store(addr, v uint64) bool {
	i := (addr - s.base) / 8
	if addr%8 != 0 || i >= uint64(len(s.words)) {
		return false
	}
	s.words[i] = v
	return true
}

// Under the on-stack policy the task's x18 is on the interrupted stack:
// an SCS-only unwinder stops at the boundary and says so.
func ExampleSave_hiddenTop() {
	stack := &taskStack{base: 0xffff800008000000}
	m, _ := scs.New(scs.Config{Policy: scs.OnStack, Mem: stack},
		scs.NewAllocator(0xffff800010000000))
	m.Push(0, 0xffff800080001000)
	sp := stack.base + 16384
	m.EnterIRQ(0, sp-16, 0xffff800080002000) // stp x18, xzr, [sp, #-16]!
	m.Push(0, 0xffff800080003000)

	store := make([]uint64, 8)
	n, err := m.Save(0, store, 0)
	fmt.Println(n, errors.Is(err, scs.ErrInterruptedTopHidden), errors.Is(err, scs.ErrCorrupt))
	// Output:
	// 1 true false
}

// A View of a shadow stack captured from a real program: its bytes as
// read from the dump (little-endian, from the stack's base), the captured
// x18, the program's VA layout. PACs are stripped.
func ExampleNewSnapshotView() {
	l := ptrauth.NewLayout(48, true)
	data := make([]byte, 64) // [anon:shadow call stack] at 0x7f0000000000
	binary.LittleEndian.PutUint64(data[0:], 0x0000aaaaaaaa1234)
	binary.LittleEndian.PutUint64(data[8:], 0x0012aaaaaaaa5678) // signed: PAC in bits 54:48
	v := scs.NewSnapshotView(data, 0x7f0000000000, 0x7f0000000010, l)

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

func ExampleParsePolicy() {
	p, err := scs.ParsePolicy("per-cpu")
	fmt.Println(p, err)
	_, err = scs.ParsePolicy("percpu")
	fmt.Println(err)
	// Output:
	// per-cpu <nil>
	// scs: unknown policy "percpu" (want thread_info, on-stack or per-cpu)
}
