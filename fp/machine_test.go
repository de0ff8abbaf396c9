package fp

import (
	"fmt"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/internal/mem"
)

// This file lays out stacks the way arm64 Linux does, for the tests: task
// stacks with their pt_regs and FINAL record at the top, frame records
// pushed by calls, pt_regs pushed at exception entry, per-CPU IRQ/SDEI
// stacks entered from an interrupted context, and return stacks.

// machine is a mem.Memory with the stacks laid out so far.
type machine struct {
	t      testing.TB
	mem    *mem.Memory
	stacks []Stack
	task   *tstack // the task stack, if any
}

func newMachine(t testing.TB) *machine {
	return &machine{t: t, mem: &mem.Memory{}}
}

// tstack is a stack under construction. It grows down from High: sp is
// the lowest used byte and fp the current x29.
type tstack struct {
	m    *machine
	s    Stack
	r    *mem.Region
	sp   uint64
	fp   uint64
	regs uint64 // for a task stack: task_pt_regs
}

func (m *machine) region(name, kind string, base, size uint64) *mem.Region {
	m.t.Helper()
	r, err := mem.NewRegion(name, kind, base, size)
	if err != nil {
		m.t.Fatal(err)
	}
	if err := m.mem.Add(r); err != nil {
		m.t.Fatal(err)
	}
	return r
}

// stack adds an empty stack [low, low+size) of kind k.
func (m *machine) stack(k StackKind, name string, low, size uint64) *tstack {
	m.t.Helper()
	r := m.region(name, k.String(), low, size)
	s := &tstack{m: m, s: Stack{Kind: k, Low: low, High: low + size, Name: name}, r: r, sp: low + size}
	m.stacks = append(m.stacks, s.s)
	return s
}

// taskStack adds a task stack with the task's pt_regs at the top holding
// the FINAL meta record; x29 points at that record, as at ret_from_fork.
func (m *machine) taskStack(name string, low, size uint64) *tstack {
	m.t.Helper()
	s := m.stack(Task, name, low, size)
	s.sp -= PtRegsSize
	s.regs = s.sp
	s.store(s.regs+PtRegsStackFrameOff+MetaTypeOff, MetaFinal)
	s.fp = s.regs + PtRegsStackFrameOff
	m.task = s
	return s
}

func (s *tstack) store(addr, v uint64) {
	s.m.t.Helper()
	if !s.m.mem.Store(addr, v) {
		s.m.t.Fatalf("store %#x outside memory", addr)
	}
}

// call models a function prologue (stp x29, x30, [sp, #-32]!; mov x29, sp)
// in a function called with return address lr: it pushes a 32-byte frame
// with the record {fp, lr} at its bottom and returns the record's address.
func (s *tstack) call(lr uint64) uint64 {
	s.m.t.Helper()
	if s.sp-s.s.Low < 32 {
		s.m.t.Fatalf("stack %s overflows", s.s.Name)
	}
	s.sp -= 32
	s.store(s.sp, s.fp)
	s.store(s.sp+8, lr)
	s.fp = s.sp
	return s.sp
}

// exception models kernel_entry from EL1 interrupting pc: it pushes a
// pt_regs with regs[29] = the interrupted x29, lr = lr, pc = pc and the
// stackframe meta record {0, 0, PT_REGS}, and points x29 at that record.
// It returns the pt_regs address.
func (s *tstack) exception(pc, lr uint64) uint64 {
	s.m.t.Helper()
	s.sp -= PtRegsSize
	regs := s.sp
	s.store(regs+PtRegsX29Off, s.fp)
	s.store(regs+PtRegsLROff, lr)
	s.store(regs+PtRegsSPOff, regs+PtRegsSize)
	s.store(regs+PtRegsPCOff, pc)
	s.store(regs+PtRegsStackFrameOff+MetaTypeOff, MetaPtRegs)
	s.fp = regs + PtRegsStackFrameOff
	return regs
}

// enterFrom models call_on_irq_stack (or the SDEI entry) switching to s
// from the context whose x29 is from.fp: the first record on s links back
// to it.
func (s *tstack) enterFrom(from *tstack, lr uint64) uint64 {
	s.fp = from.fp
	return s.call(lr)
}

// config returns a walk of the machine starting at s's current fp with
// start pc.
func (m *machine) config(s *tstack, pc uint64) *Config {
	c := &Config{Stacks: m.stacks, FP: s.fp, PC: pc}
	if m.task != nil {
		c.TaskPtRegs = m.task.regs
	}
	return withMem(m.mem, c)
}

// retStack writes a return stack (count, then {ret, fp} oldest first) at
// addr in a region of its own and returns addr.
func (m *machine) retStack(name string, addr uint64, entries ...[2]uint64) (uint64, []byte) {
	m.t.Helper()
	r := m.region(name, "retstack", addr, 8+16*uint64(len(entries))+8)
	r.Store(addr, uint64(len(entries)))
	for i, e := range entries {
		r.Store(addr+8+16*uint64(i), e[0])
		r.Store(addr+16+16*uint64(i), e[1])
	}
	return addr, r.View()
}

// pcs returns the PCs of frames.
func pcs(frames []Frame) []uint64 {
	out := make([]uint64, len(frames))
	for i, f := range frames {
		out[i] = f.PC
	}
	return out
}

// walkAll collects every frame of c. It also walks a copy of c over a
// snapshot of its bytes (dataConfig: c's Data are live views of the
// model's memory) and fails the test unless both give the same frames,
// end and error, with Walk and with Save.
func walkAll(t testing.TB, c *Config) ([]Frame, End, error) {
	t.Helper()
	frames, end, err := walkFrames(c)
	if d := dataConfig(c); d != nil {
		checkSameWalk(t, c, d, frames, end, err)
	}
	return frames, end, err
}

func walkFrames(c *Config) ([]Frame, End, error) {
	var frames []Frame
	end, err := Walk(c, func(f Frame) bool { frames = append(frames, f); return true })
	return frames, end, err
}

// checkSameWalk fails t unless the walk of d gives frames, end and err
// (the walk of c), and Save agrees on both.
// The caller's bytes are walked twice: as given (8-byte aligned, viewed
// in place) and shifted to an odd address (decoded into a copy).
func checkSameWalk(t testing.TB, c, d *Config, frames []Frame, end End, err error) {
	t.Helper()
	for _, d := range []*Config{d, misaligned(d)} {
		f2, end2, err2 := walkFrames(d)
		if !slices.Equal(frames, f2) || end != end2 || fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("the walk of a snapshot of the bytes differs from the live walk:\n %x %v %v\n %x %v %v", pcs(frames), end, err, pcs(f2), end2, err2)
		}
		for _, size := range []int{len(frames) + 1, max(len(frames)-1, 0)} {
			s1, s2 := make([]uint64, size), make([]uint64, size)
			n1, e1, err1 := SaveEnd(c, s1, 0)
			n2, e2, err2 := SaveEnd(d, s2, 0)
			if !slices.Equal(s1[:n1], s2[:n2]) || e1 != e2 || fmt.Sprint(err1) != fmt.Sprint(err2) {
				t.Fatalf("Save into %d: snapshot %x %v %v, live %x %v %v", size, s2[:n2], e2, err2, s1[:n1], e1, err1)
			}
		}
	}
}

// misaligned returns a copy of d whose stacks' Data start at odd
// addresses.
func misaligned(d *Config) *Config {
	e := *d
	e.Stacks = slices.Clone(d.Stacks)
	for i := range e.Stacks {
		if data := e.Stacks[i].Data; data != nil {
			e.Stacks[i].Data = append(make([]byte, 1, len(data)+1), data...)[1:]
		}
	}
	return &e
}

// withMem gives c's stacks without Data, and its return stacks without
// data, the bytes of mm's regions holding them, in place (mem.Region.View:
// later stores to mm are seen by the walk), as a caller whose memory is
// live hands it over. A stack not wholly inside one region keeps no Data
// (Init refuses it). It clones c.Stacks first and returns c.
func withMem(mm *mem.Memory, c *Config) *Config {
	c.Stacks = slices.Clone(c.Stacks)
	for i := range c.Stacks {
		s := &c.Stacks[i]
		if s.Low == 0 || s.Data != nil {
			continue
		}
		r := mm.Find(s.Low)
		if r == nil || s.High < s.Low || !r.Contains(s.Low, s.High-s.Low) {
			continue
		}
		s.Data = r.View()[s.Low-r.Base : s.High-r.Base]
	}
	// A return stack's data runs from its address to the end of its
	// region.
	retData := func(a uint64) []byte {
		if r := mm.Find(a); r != nil {
			return r.View()[a-r.Base:]
		}
		return nil
	}
	if c.GraphStackData == nil && c.GraphStack != 0 {
		c.GraphStackData = retData(c.GraphStack)
	}
	if c.KretprobeStackData == nil && c.KretprobeStack != 0 {
		c.KretprobeStackData = retData(c.KretprobeStack)
	}
	return c
}

// dataConfig returns a copy of c whose stacks' Data and return stacks'
// data are copies of c's (a snapshot of memory c sees live), or nil if c
// has a stack without Data.
func dataConfig(c *Config) *Config {
	d := *c
	d.Stacks = slices.Clone(c.Stacks)
	for i := range d.Stacks {
		s := &d.Stacks[i]
		if s.Low == 0 {
			continue
		}
		if s.Data == nil {
			return nil
		}
		s.Data = slices.Clone(s.Data)
	}
	d.GraphStackData = slices.Clone(c.GraphStackData)
	d.KretprobeStackData = slices.Clone(c.KretprobeStackData)
	return &d
}

// kernel text addresses used as return addresses
const (
	text     = 0xffff800080010000
	stackTop = 0xffff800090000000
)

func pc(i int) uint64 { return text + 0x100*uint64(i) + 4 }

// exceptionFrom models an exception handled on s (an SDEI or overflow
// stack) that interrupted the context whose x29 is from.fp at pc: the
// pt_regs are pushed on s itself, with regs[29] = from.fp.
func (s *tstack) exceptionFrom(from *tstack, pc, lr uint64) uint64 {
	s.fp = from.fp
	return s.exception(pc, lr)
}
