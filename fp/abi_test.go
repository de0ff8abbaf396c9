package fp

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

// The layout of Debian's 6.1 and 6.12 kernels (from their BTF): pt_regs
// of 336 bytes with stackframe at 304.
var ptRegs61 = PtRegsLayout{Size: 336, X29: 29 * 8, PC: 256, StackFrame: 304}

// oldWorld is a kernel stack laid out as 6.1/6.12 lay it out: an IRQ
// stack with two records, call_on_irq_stack's record on the task stack,
// el1h_64_irq's pt_regs with the synthetic record {x29, elr} EL1 entry
// writes, the interrupted function's record, and the task's pt_regs at
// the top whose stackframe (EL0 entry zeroes it) ends the walk.
type oldWorld struct {
	irq, task []byte
	cfg       Config
	exc       uint64 // the interrupted context's pt_regs
}

const (
	owIRQ  = 0x10000
	owTask = 0x20000
	owSize = 0x4000
)

func (w *oldWorld) set(a, v uint64) {
	if a >= owTask {
		binary.LittleEndian.PutUint64(w.task[a-owTask:], v)
	} else {
		binary.LittleEndian.PutUint64(w.irq[a-owIRQ:], v)
	}
}

func newOldWorld() *oldWorld {
	w := &oldWorld{irq: make([]byte, owSize), task: make([]byte, owSize)}
	final := uint64(owTask + owSize - 336)
	w.set(owIRQ+0x3f00, owIRQ+0x3f40) // handler
	w.set(owIRQ+0x3f08, pc(1))
	w.set(owIRQ+0x3f40, owTask+0x3000) // gic_handle_irq -> call_on_irq_stack's record
	w.set(owIRQ+0x3f48, pc(2))
	w.set(owTask+0x3000, owTask+0x3100+0x40+304) // call_on_irq_stack -> el1h_64_irq_handler's record
	w.set(owTask+0x3008, pc(3))
	w.exc = owTask + 0x3100 + 0x40
	w.set(owTask+0x3100+0x40-0x40, 0) // (unused)
	// el1h_64_irq_handler's record is call_on_irq_stack's caller; the
	// record at 0x3000 points straight at the pt_regs' stackframe, as
	// el1_interrupt's frame chain does.
	w.set(w.exc+304, owTask+0x3800) // synthetic {x29, elr}
	w.set(w.exc+312, pc(20))
	w.set(w.exc+256, pc(20))
	w.set(w.exc+29*8, owTask+0x3800)
	w.set(owTask+0x3800, final+304) // the interrupted function's record -> final
	w.set(owTask+0x3808, pc(4))
	w.cfg = Config{
		Stacks: []Stack{
			{Kind: Task, Low: owTask, High: owTask + owSize, Name: "task", Data: w.task},
			{Kind: IRQ, Low: owIRQ, High: owIRQ + owSize, Name: "irq", Data: w.irq},
		},
		FP: owIRQ + 0x3f00, PC: pc(0), Start: OriginRegsPC,
		TaskPtRegs: final, ABI: ABIFinalRecord, PtRegs: ptRegs61,
	}
	return w
}

// saveAll checks Save agrees with the walk's pcs, end and error.
func saveAgrees(t *testing.T, c *Config, frames []Frame, end End, err error) {
	t.Helper()
	store := make([]uint64, len(frames)+1)
	n, e, serr := SaveEnd(c, store, 0)
	if !slices.Equal(store[:n], pcs(frames)) || e != end || (serr == nil) != (err == nil) {
		t.Fatalf("Save %x %v %v, Walk %x %v %v", store[:n], e, serr, pcs(frames), end, err)
	}
}

// Under ABIFinalRecord the walk ends at the task's pt_regs stackframe
// before reading it, and crosses the exception boundary by following the
// synthetic record, reporting the interrupted pc as OriginRegsPC.
func TestFinalRecordABI(t *testing.T) {
	w := newOldWorld()
	// The record at the end holds garbage that would be corruption if it
	// were read: the walk must stop before reading it.
	w.set(w.cfg.TaskPtRegs+304, 0x7)
	w.set(w.cfg.TaskPtRegs+312, 0x7)
	frames, end, err := walkFrames(&w.cfg)
	want := []uint64{pc(0), pc(1), pc(2), pc(3), pc(20), pc(4)}
	if err != nil || end != EndFinal || !slices.Equal(pcs(frames), want) {
		t.Fatalf("%x %v %v, want %x final", pcs(frames), end, err, want)
	}
	for i, f := range frames {
		if i > 0 && (f.Origin == OriginRegsPC) != (i == 4) {
			t.Errorf("frame %d %#x origin %v", i, f.PC, f.Origin)
		}
	}
	if frames[4].FP != owTask+0x3800 || frames[4].Stack != Task || frames[2].Stack != IRQ {
		t.Errorf("crossing frame %+v, frame 2 stack %v", frames[4], frames[2].Stack)
	}
	saveAgrees(t, &w.cfg, frames, end, err)
	checkSameWalk(t, &w.cfg, misaligned(&w.cfg), frames, end, err)

	// The same stack under the meta-record ABI: the record at the end
	// is no meta record and the walk runs into it.
	m := w.cfg
	m.ABI = ABIMetaRecord
	if _, end, err := walkFrames(&m); end != EndError || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("meta ABI over the old stack: %v %v", end, err)
	}

	// A record that only looks like the synthetic one (pt_regs pc
	// differs) is an ordinary frame.
	w.set(w.exc+256, pc(21))
	frames, _, _ = walkFrames(&w.cfg)
	if frames[4].Origin != OriginFrame || frames[4].PC != pc(20) {
		t.Fatalf("frame 4 %+v, want an ordinary frame", frames[4])
	}
}

// The reliable walk fails at the synthetic record, the exception
// boundary, and Save (which has a fast path) agrees.
func TestFinalRecordABIReliable(t *testing.T) {
	w := newOldWorld()
	w.cfg.Reliable = true
	w.cfg.Start = OriginTask
	frames, end, err := walkFrames(&w.cfg)
	if !errors.Is(err, ErrUnreliable) || end != EndError || len(frames) != 4 {
		t.Fatalf("%x %v %v, want 4 frames and ErrUnreliable", pcs(frames), end, err)
	}
	saveAgrees(t, &w.cfg, frames, end, err)
	// Without the exception the reliable walk ends at the task pt_regs.
	w.set(owTask+0x3000, owTask+0x3800)
	frames, end, err = walkFrames(&w.cfg)
	if err != nil || end != EndFinal || !slices.Equal(pcs(frames), []uint64{pc(0), pc(1), pc(2), pc(3), pc(4)}) {
		t.Fatalf("%x %v %v", pcs(frames), end, err)
	}
	saveAgrees(t, &w.cfg, frames, end, err)
}

// Under ABIFinalRecord a {0, 0} record that is not at the task's pt_regs
// is an ordinary record, as unwind_next_frame_record of 6.1 and 6.12
// reads it: its lr 0 is reported and the next step, at fp 0, fails as fp
// outside the stacks; with ZeroFPEnds it ends the chain. A type word
// after it is never read: FINAL there ends nothing.
func TestFinalRecordABIZeroRecord(t *testing.T) {
	for _, zero := range []bool{false, true} {
		w := newOldWorld()
		w.cfg.ZeroFPEnds = zero
		w.set(owTask+0x3800, 0) // the interrupted function's record is {0, 0, FINAL}
		w.set(owTask+0x3808, 0)
		w.set(owTask+0x3810, MetaFinal)
		frames, end, err := walkFrames(&w.cfg)
		want := []uint64{pc(0), pc(1), pc(2), pc(3), pc(20), 0}
		var ce *CorruptError
		if !slices.Equal(pcs(frames), want) {
			t.Fatalf("zero-fp-ends %v: %x, want %x", zero, pcs(frames), want)
		}
		if zero && (end != EndZeroFP || err != nil) {
			t.Fatalf("zero-fp-ends: %v %v", end, err)
		}
		if !zero && (end != EndError || !errors.As(err, &ce) || ce.Rule != RuleFPOutsideStacks || ce.Addr != 0) {
			t.Fatalf("%v %v, want fp outside stacks at 0", end, err)
		}
		saveAgrees(t, &w.cfg, frames, end, err)
	}
}

// The end is recognised by address before any other rule, as the kernel
// checks it first: a chain that jumps over the task pt_regs' stackframe
// and comes back down to it still ends there. Records above it are
// walked by the ordinary rules (Save's fast path stops below the end, so
// it must hand them to the general step).
func TestFinalRecordABIRules(t *testing.T) {
	w := newOldWorld()
	final := w.cfg.TaskPtRegs + 304
	w.set(owTask+0x3800, final+16) // past the end, still on the stack
	w.set(final+16, final)         // back down to the end
	w.set(final+24, pc(5))
	frames, end, err := walkFrames(&w.cfg)
	if end != EndFinal || err != nil || len(frames) != 7 || frames[6].PC != pc(5) {
		t.Fatalf("%x %v %v", pcs(frames), end, err)
	}
	saveAgrees(t, &w.cfg, frames, end, err)
	w.set(final+16, 5) // misaligned
	w.set(final+24, pc(6))
	frames, end, err = walkFrames(&w.cfg)
	var ce *CorruptError
	if end != EndError || !errors.As(err, &ce) || ce.Rule != RuleMisalignedFP || len(frames) != 7 || frames[6].PC != pc(6) {
		t.Fatalf("%x %v %v", pcs(frames), end, err)
	}
	saveAgrees(t, &w.cfg, frames, end, err)
	// TaskPtRegs 0: no end is valid; the zeroed stackframe is read as a
	// {0, 0} record and the walk fails at fp 0.
	w = newOldWorld()
	w.cfg.TaskPtRegs = 0
	frames, end, err = walkFrames(&w.cfg)
	if end != EndError || !errors.As(err, &ce) || ce.Rule != RuleFPOutsideStacks || len(frames) != 7 || frames[6].PC != 0 {
		t.Fatalf("%x %v %v", pcs(frames), end, err)
	}
}

// The pt_regs layout is the Config's: under the meta ABI a PT_REGS meta
// record is found at StackFrame, and bad layouts or ABIs fail in Init.
func TestPtRegsLayout(t *testing.T) {
	w := newOldWorld()
	c := w.cfg
	c.ABI = ABIMetaRecord
	// Turn the synthetic record into a meta record {0, 0, PT_REGS} and
	// the end into {0, 0, FINAL}, both at offset 304.
	w.set(w.exc+304, 0)
	w.set(w.exc+312, 0)
	w.set(w.exc+320, MetaPtRegs)
	w.set(c.TaskPtRegs+320, MetaFinal)
	frames, end, err := walkFrames(&c)
	want := []uint64{pc(0), pc(1), pc(2), pc(3), pc(20), pc(4)}
	if err != nil || end != EndFinal || !slices.Equal(pcs(frames), want) || frames[4].Origin != OriginRegsPC {
		t.Fatalf("%x %v %v", pcs(frames), end, err)
	}
	saveAgrees(t, &c, frames, end, err)
	for _, bad := range []struct {
		abi ABI
		l   PtRegsLayout
	}{
		{ABIFinalRecord + 1, PtRegsLayout{}},                                         // the first value past the enum
		{ABIMetaRecord, PtRegsLayout{Size: 336, X29: 232, PC: 256, StackFrame: 320}}, // meta record past the end
		{ABIFinalRecord, PtRegsLayout{Size: 336, X29: 336, PC: 256, StackFrame: 304}},
		{ABIFinalRecord, PtRegsLayout{Size: 336, X29: 232, PC: 252, StackFrame: 304}},
		{ABIFinalRecord, PtRegsLayout{Size: 1 << 20, X29: 232, PC: 256, StackFrame: 304}},
		{ABIFinalRecord, PtRegsLayout{Size: 8, X29: 0, PC: 0, StackFrame: 0}},
	} {
		c := w.cfg
		c.ABI, c.PtRegs = bad.abi, bad.l
		frames, end, err := walkFrames(&c)
		if len(frames) != 0 || end != EndError || err == nil || errors.Is(err, ErrCorrupt) {
			t.Errorf("%v %+v: %d frames, %v %v", bad.abi, bad.l, len(frames), end, err)
		}
		if n, err := Save(&c, make([]uint64, 4), 0); n != 0 || err == nil {
			t.Errorf("Save %v %+v: %d %v", bad.abi, bad.l, n, err)
		}
	}
	// {Size: 336, StackFrame: 320} leaves a 16-byte record: fine under
	// the old ABI.
	c = w.cfg
	c.PtRegs.StackFrame = 320
	if _, end, err := walkFrames(&c); end == EndError && err != nil && !errors.Is(err, ErrCorrupt) {
		t.Errorf("old ABI, stackframe 320: %v", err)
	}
}
