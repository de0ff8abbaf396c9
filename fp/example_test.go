package fp_test

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
)

// buildTask lays out a 16 KiB task stack, as bytes the caller owns, with
// the task's pt_regs (FINAL record) at the top and three frame records
// below, and returns the stack and the innermost fp.
func buildTask() (fp.Stack, uint64) {
	const low = 0xffff800090000000
	task := fp.Stack{Kind: fp.Task, Low: low, High: low + fp.TaskStackSize, Name: "task", Data: make([]byte, fp.TaskStackSize)}
	store := func(addr, v uint64) { binary.LittleEndian.PutUint64(task.Data[addr-low:], v) }
	regs := fp.TaskPtRegsAddr(task.High, fp.PtRegsLayout{})
	store(regs+fp.PtRegsStackFrameOff+fp.MetaTypeOff, fp.MetaFinal)
	x29 := regs + fp.PtRegsStackFrameOff
	sp := regs
	for _, lr := range []uint64{0xffff800080001004, 0xffff800080002008, 0xffff80008000300c} {
		sp -= 32
		store(sp, x29) // stp x29, x30, [sp, #-32]!
		store(sp+8, lr)
		x29 = sp // mov x29, sp
	}
	return task, x29
}

// Walking memory the caller owns: a dump holds one segment of bytes at a
// known address; each stack is a slice of it. Here the segment holds a
// task stack whose three frame records end at the FINAL record in the
// task's pt_regs.
func Example() {
	task, x29 := buildTask()
	segment := task.Data // e.g. a PT_LOAD segment of a core file at task.Low
	cfg := &fp.Config{
		Stacks:     []fp.Stack{{Kind: fp.Task, Low: task.Low, High: task.High, Data: segment}},
		FP:         x29,
		PC:         0xffff800080004000,
		TaskPtRegs: fp.TaskPtRegsAddr(task.High, fp.PtRegsLayout{}),
	}
	store := make([]uint64, 16)
	n, end, err := fp.SaveEnd(cfg, store, 0)
	fmt.Printf("%d frames, %v, %v\n", n, end, err)
	for _, pc := range store[:n] {
		fmt.Printf("%#x\n", pc)
	}
	// Output:
	// 4 frames, final, <nil>
	// 0xffff800080004000
	// 0xffff80008000300c
	// 0xffff800080002008
	// 0xffff800080001004
}

func ExampleWalk() {
	task, x29 := buildTask()
	cfg := &fp.Config{
		Stacks:     []fp.Stack{task},
		FP:         x29,
		PC:         0xffff800080004000,
		TaskPtRegs: fp.TaskPtRegsAddr(task.High, fp.PtRegsLayout{}),
	}
	end, err := fp.Walk(cfg, func(f fp.Frame) bool {
		fmt.Printf("%#x %v %v\n", f.PC, f.Origin, f.Stack)
		return true
	})
	fmt.Println(end, err)
	// Output:
	// 0xffff800080004000 caller task
	// 0xffff80008000300c frame task
	// 0xffff800080002008 frame task
	// 0xffff800080001004 frame task
	// final <nil>
}

func ExampleSave() {
	task, x29 := buildTask()
	cfg := &fp.Config{Stacks: []fp.Stack{task}, FP: x29, PC: 0xffff800080004000, TaskPtRegs: fp.TaskPtRegsAddr(task.High, fp.PtRegsLayout{})}
	store := make([]uint64, 8)
	n, err := fp.Save(cfg, store, 1) // skip the innermost frame
	fmt.Printf("%d %x %v\n", n, store[:n], err)
	// Output:
	// 3 [ffff80008000300c ffff800080002008 ffff800080001004] <nil>
}

func ExampleFrames() {
	task, x29 := buildTask()
	binary.LittleEndian.PutUint64(task.Data[x29-task.Low:], 0x1000) // corrupt the innermost record's fp
	cfg := &fp.Config{Stacks: []fp.Stack{task}, FP: x29, PC: 0xffff800080004000, TaskPtRegs: fp.TaskPtRegsAddr(task.High, fp.PtRegsLayout{})}
	for f, err := range fp.Frames(cfg) {
		if err != nil {
			var ce *fp.CorruptError
			fmt.Println(errors.As(err, &ce), ce.Rule)
			break
		}
		fmt.Printf("%#x\n", f.PC)
	}
	// Output:
	// 0xffff800080004000
	// 0xffff80008000300c
	// true fp outside stacks
}

func ExampleUnwinder() {
	task, x29 := buildTask()
	cfg := &fp.Config{Stacks: []fp.Stack{task}, FP: x29, PC: 0xffff800080004000, TaskPtRegs: fp.TaskPtRegsAddr(task.High, fp.PtRegsLayout{}), Reliable: true}
	var u fp.Unwinder
	u.Init(cfg)
	n := 0
	for u.Next() {
		n++
	}
	fmt.Println(n, u.End(), u.End().Complete(), u.Err())
	// Output:
	// 4 final true <nil>
}
