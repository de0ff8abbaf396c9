package fp

import (
	"errors"
	"slices"
	"sync"
	"testing"
)

type wantFrame struct {
	pc     uint64
	origin Origin
	stack  StackKind
}

func checkFrames(t *testing.T, frames []Frame, want []wantFrame) {
	t.Helper()
	if len(frames) != len(want) {
		t.Fatalf("%d frames %x, want %d", len(frames), pcs(frames), len(want))
	}
	for i, w := range want {
		f := frames[i]
		if f.PC != w.pc || f.Origin != w.origin || f.Stack != w.stack {
			t.Errorf("frame %d: pc %#x %v %v, want %#x %v %v", i, f.PC, f.Origin, f.Stack, w.pc, w.origin, w.stack)
		}
	}
}

// irqOnTask: a task running A -> B -> C is interrupted at pc(50) in C; the
// entry code pushes pt_regs on the task stack, el1_interrupt (pc(51)) calls
// call_on_irq_stack, which switches to the IRQ stack, where handlers
// pc(52), pc(53) run.
func irqOnTask(t testing.TB) (m *machine, task, irq *tstack) {
	m = newMachine(t)
	task = m.taskStack("task", stackTop, TaskStackSize)
	task.call(pc(1))
	task.call(pc(2))
	task.call(pc(3))
	task.exception(pc(50), pc(3)+0x40)
	task.call(pc(51))
	irq = m.stack(IRQ, "cpu0 irq", stackTop+0x100000, IRQStackSize)
	irq.enterFrom(task, pc(52))
	irq.call(pc(53))
	return m, task, irq
}

var irqOnTaskFrames = []wantFrame{
	{pc(53), OriginFrame, IRQ},
	{pc(52), OriginFrame, IRQ},
	{pc(51), OriginFrame, Task},
	{pc(50), OriginRegsPC, Task},
	{pc(3), OriginFrame, Task},
	{pc(2), OriginFrame, Task},
	{pc(1), OriginFrame, Task},
}

func TestIRQOnTask(t *testing.T) {
	m, _, irq := irqOnTask(t)
	frames, end, err := walkAll(t, m.config(irq, pc(0)))
	if err != nil || end != EndFinal {
		t.Fatalf("end %v err %v", end, err)
	}
	checkFrames(t, frames, append([]wantFrame{{pc(0), OriginCaller, IRQ}}, irqOnTaskFrames...))
}

// SDEI on IRQ on task: while the IRQ handler pc(53) runs, an SDEI event
// arrives; its entry switches to the SDEI normal stack and saves pt_regs
// there (pc(60) interrupted), then handlers pc(61), pc(62) run; a critical
// event then interrupts pc(63) of the normal handler.
func TestSDEIOnIRQOnTask(t *testing.T) {
	m, _, irq := irqOnTask(t)
	sdei := m.stack(SDEINormal, "cpu0 sdei normal", stackTop+0x200000, SDEIStackSize)
	sdei.exceptionFrom(irq, pc(60), 0)
	sdei.call(pc(61))
	sdei.call(pc(62))
	crit := m.stack(SDEICritical, "cpu0 sdei critical", stackTop+0x300000, SDEIStackSize)
	crit.exceptionFrom(sdei, pc(63), 0)
	crit.call(pc(64))

	frames, end, err := walkAll(t, m.config(sdei, pc(0)))
	if err != nil || end != EndFinal {
		t.Fatalf("normal: end %v err %v", end, err)
	}
	want := []wantFrame{
		{pc(0), OriginCaller, SDEINormal},
		{pc(62), OriginFrame, SDEINormal},
		{pc(61), OriginFrame, SDEINormal},
		{pc(60), OriginRegsPC, SDEINormal},
	}
	checkFrames(t, frames, append(want, irqOnTaskFrames...))

	frames, end, err = walkAll(t, m.config(crit, pc(0)))
	if err != nil || end != EndFinal {
		t.Fatalf("critical: end %v err %v", end, err)
	}
	want2 := []wantFrame{
		{pc(0), OriginCaller, SDEICritical},
		{pc(64), OriginFrame, SDEICritical},
		{pc(63), OriginRegsPC, SDEICritical},
		{pc(62), OriginFrame, SDEINormal},
		{pc(61), OriginFrame, SDEINormal},
		{pc(60), OriginRegsPC, SDEINormal},
	}
	checkFrames(t, frames, append(want2, irqOnTaskFrames...))

	// Without the SDEI stacks accessible (not in NMI context), the same
	// start fails at once.
	c := m.config(crit, pc(0))
	c.Stacks = c.Stacks[:2]
	frames, end, err = walkAll(t, c)
	if end != EndError || len(frames) != 1 || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("inaccessible sdei: %v %v %d", end, err, len(frames))
	}
}

func TestOverflowStack(t *testing.T) {
	// A stack overflow on the task: the handler saves pt_regs on the
	// per-CPU overflow stack and runs there.
	m := newMachine(t)
	task := m.taskStack("task", stackTop, TaskStackSize)
	task.call(pc(1))
	task.call(pc(2))
	ov := m.stack(Overflow, "cpu0 overflow", stackTop+0x100000, OverflowStackSize)
	ov.exceptionFrom(task, pc(70), 0)
	ov.call(pc(71))
	frames, end, err := walkAll(t, m.config(ov, pc(0)))
	if err != nil || end != EndFinal {
		t.Fatalf("end %v err %v", end, err)
	}
	checkFrames(t, frames, []wantFrame{
		{pc(0), OriginCaller, Overflow},
		{pc(71), OriginFrame, Overflow},
		{pc(70), OriginRegsPC, Overflow},
		{pc(2), OriginFrame, Task},
		{pc(1), OriginFrame, Task},
	})
}

func TestStartFromRegs(t *testing.T) {
	// kunwind_init_from_regs: start at regs->pc with fp = regs->regs[29].
	m := newMachine(t)
	task := m.taskStack("task", stackTop, TaskStackSize)
	task.call(pc(1))
	task.call(pc(2))
	c := m.config(task, pc(50))
	c.Start = OriginRegsPC
	frames, end, err := walkAll(t, c)
	if err != nil || end != EndFinal {
		t.Fatalf("end %v err %v", end, err)
	}
	checkFrames(t, frames, []wantFrame{{pc(50), OriginRegsPC, Task}, {pc(2), OriginFrame, Task}, {pc(1), OriginFrame, Task}})
	c.Reliable = true
	frames, end, err = walkAll(t, c)
	if end != EndError || len(frames) != 0 || !errors.Is(err, ErrUnreliable) {
		t.Fatalf("reliable from regs: %v %v %d", end, err, len(frames))
	}
}

func TestReliable(t *testing.T) {
	// A plain task chain is reliable.
	m, s, want := taskChain(t, 6)
	c := m.config(s, pc(0))
	c.Reliable = true
	frames, end, err := walkAll(t, c)
	if err != nil || end != EndFinal || !slices.Equal(pcs(frames), want) {
		t.Fatalf("task chain: %v %v %x", end, err, pcs(frames))
	}
	// An exception boundary is not: the frames before it, then
	// ErrUnreliable (not ErrCorrupt), and the REGS_PC frame is not given.
	m, _, irq := irqOnTask(t)
	c = m.config(irq, pc(0))
	c.Reliable = true
	frames, end, err = walkAll(t, c)
	if end != EndError || !errors.Is(err, ErrUnreliable) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("irq: end %v err %v", end, err)
	}
	if want := []uint64{pc(0), pc(53), pc(52), pc(51)}; !slices.Equal(pcs(frames), want) {
		t.Fatalf("irq: pcs %x, want %x", pcs(frames), want)
	}
	store := make([]uint64, 16)
	n, serr := Save(c, store, 1)
	if n != 3 || !errors.Is(serr, ErrUnreliable) {
		t.Fatalf("Save reliable: %d %v", n, serr)
	}
}

func TestWalkStopAndFrames(t *testing.T) {
	m, s, want := taskChain(t, 10)
	c := m.config(s, pc(0))
	var got []uint64
	end, err := Walk(c, func(f Frame) bool { got = append(got, f.PC); return len(got) < 4 })
	if end != EndStopped || err != nil || !slices.Equal(got, want[:4]) {
		t.Fatalf("stop: %v %v %x", end, err, got)
	}
	got = got[:0]
	for f, err := range Frames(c) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f.PC)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Frames: %x", got)
	}
	// break out of Frames early
	got = got[:0]
	for f := range Frames(c) {
		got = append(got, f.PC)
		if len(got) == 2 {
			break
		}
	}
	if !slices.Equal(got, want[:2]) {
		t.Fatalf("Frames break: %x", got)
	}
	// A failing walk yields its frames, then one error.
	s.store(s.fp, 8) // innermost record's fp: outside every stack
	var errs []error
	got = got[:0]
	for f, err := range Frames(m.config(s, pc(0))) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		got = append(got, f.PC)
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrCorrupt) || !slices.Equal(got, want[:2]) {
		t.Fatalf("Frames error: %v %x", errs, got)
	}
	// Unwinder step by step, Stop.
	var u Unwinder
	u.Init(c)
	if !u.Next() || u.Frame().PC != pc(0) || u.End() != EndNone {
		t.Fatal("Unwinder first frame")
	}
	u.Stop()
	if u.Next() || u.End() != EndStopped || u.Err() != nil {
		t.Fatal("Unwinder after Stop")
	}
}

// Save is Walk's PCs with exactly skip frames removed, for every skip and
// store size; a full store is not an error, and SaveEnd tells a complete
// exact fit from a truncated trace.
func TestSaveSkipExact(t *testing.T) {
	m, _, irq := irqOnTask(t)
	c := m.config(irq, pc(0))
	frames, end, err := walkAll(t, c)
	if err != nil || end != EndFinal {
		t.Fatal(end, err)
	}
	full := pcs(frames)
	for skip := 0; skip <= len(full)+2; skip++ {
		rest := full[min(skip, len(full)):]
		for size := 0; size <= len(full)+2; size++ {
			store := make([]uint64, size)
			n, end, err := SaveEnd(c, store, skip)
			if err != nil {
				t.Fatalf("skip %d size %d: %v", skip, size, err)
			}
			want := rest[:min(size, len(rest))]
			if !slices.Equal(store[:n], want) {
				t.Fatalf("skip %d size %d: %x, want %x", skip, size, store[:n], want)
			}
			wantEnd := EndFinal
			if size < len(rest) {
				wantEnd = EndStopped
			}
			if end != wantEnd {
				t.Fatalf("skip %d size %d: end %v, want %v", skip, size, end, wantEnd)
			}
			if n2, err2 := Save(c, store, skip); n2 != n || err2 != nil {
				t.Fatalf("Save != SaveEnd")
			}
		}
	}
	// A full store before a corrupt record is not an error either.
	m2, s2, want := taskChain(t, 4)
	s2.store(s2.regs+PtRegsStackFrameOff+MetaTypeOff, 7)
	c2 := m2.config(s2, pc(0))
	store := make([]uint64, len(want))
	if n, end, err := SaveEnd(c2, store, 0); n != len(want) || end != EndStopped || err != nil {
		t.Fatalf("full before corruption: %d %v %v", n, end, err)
	}
	store = make([]uint64, len(want)+1)
	if n, end, err := SaveEnd(c2, store, 0); n != len(want) || end != EndError || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("room for more: %d %v %v", n, end, err)
	}
}

// Walks may run concurrently with each other and with a writer changing
// the stacks (a CPU running while another unwinds it): no race, no panic,
// every walk ends.
func TestConcurrentWalks(t *testing.T) {
	m, task, irq := irqOnTask(t)
	c := m.config(irq, pc(0))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		lo, hi := task.sp, task.s.High
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			addr := lo + (i*8)%(hi-lo)
			v, _ := m.mem.Load(addr)
			m.mem.Store(addr, v^(i&1)<<3) // flip fp bits back and forth
		}
	}()
	var walkers sync.WaitGroup
	for g := 0; g < 4; g++ {
		walkers.Add(1)
		go func() {
			defer walkers.Done()
			store := make([]uint64, 32)
			for range 2000 {
				n, end, err := SaveEnd(c, store, 0)
				if end == EndNone || (end == EndError) != (err != nil) || n > len(store) {
					t.Errorf("n %d end %v err %v", n, end, err)
					return
				}
			}
		}()
	}
	walkers.Wait()
	close(stop)
	wg.Wait()
}
