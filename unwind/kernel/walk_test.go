package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/unwindkit/unwindkit/unwind"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/ptrauth"
)

// wordMem is memory made of 8-byte words at [base, base+8*len).
type wordMem struct {
	base  uint64
	words []uint64
}

func (m *wordMem) ReadVirt(b []byte, va uint64) error {
	for i := range b {
		a := va + uint64(i)
		if a < m.base || a-m.base >= 8*uint64(len(m.words)) {
			return fmt.Errorf("va %#x not mapped", a)
		}
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], m.words[(a-m.base)/8])
		b[i] = w[(a-m.base)%8]
	}
	return nil
}

func (m *wordMem) set(a, v uint64) { m.words[(a-m.base)/8] = v }

const (
	irqLo  = 0x10000
	taskLo = 0x20000
	size   = 0x4000
)

var regs61 = fp.PtRegsLayout{Size: 336, X29: 29 * 8, PC: 256, StackFrame: 304}

// chain builds an IRQ stack with two records, then call_on_irq_stack's
// record on the task stack, el1h_64_irq's pt_regs with a synthetic record
// {x29, elr}, the interrupted function's record, and the final pt_regs.
func chain(abi fp.ABI) (*wordMem, *Walk) {
	m := &wordMem{base: irqLo, words: make([]uint64, (taskLo+size-irqLo)/8)}
	final := uint64(taskLo + size - 336)
	m.set(irqLo+0x3f00, irqLo+0x3f40) // handler record
	m.set(irqLo+0x3f08, 0x1001)
	m.set(irqLo+0x3f40, taskLo+0x3000) // gic_handle_irq -> call_on_irq_stack record
	m.set(irqLo+0x3f48, 0x1002)
	m.set(taskLo+0x3000, taskLo+0x3100) // call_on_irq_stack record
	m.set(taskLo+0x3008, 0x1003)
	exc := uint64(taskLo + 0x3100) // el1h_64_irq_handler's record points at pt_regs.stackframe
	regs := exc + 0x40
	m.set(exc, regs+304)
	m.set(exc+8, 0x1004)
	if abi == fp.ABIFinalRecord {
		m.set(regs+304, taskLo+0x3800) // synthetic {x29, elr}
		m.set(regs+312, 0x2000)
		m.set(regs+256, 0x2000)
		m.set(regs+29*8, taskLo+0x3800)
	} else {
		m.set(regs+320, fp.MetaPtRegs)
		m.set(regs+256, 0x2000)
		m.set(regs+29*8, taskLo+0x3800)
	}
	m.set(taskLo+0x3800, final+304) // interrupted function's record -> final
	m.set(taskLo+0x3808, 0x2525000000001005)
	if abi == fp.ABIMetaRecord {
		m.set(final+320, fp.MetaFinal)
	}
	w := &Walk{Mem: m, ABI: abi, Regs: regs61, TaskPtRegs: final, FP: irqLo + 0x3f00, PC: 0x1000,
		Stacks: []Stack{{Low: taskLo, High: taskLo + size, Kind: fp.Task}, {Low: irqLo, High: irqLo + size, Kind: fp.IRQ}}}
	return m, w
}

func pcs(fs []unwind.Frame) []uint64 {
	var out []uint64
	for _, f := range fs {
		out = append(out, f.PC)
	}
	return out
}

func TestWalkABIs(t *testing.T) {
	for _, abi := range []fp.ABI{fp.ABIFinalRecord, fp.ABIMetaRecord} {
		_, w := chain(abi)
		w.Layout = testLayout(t)
		fs, end, err := w.Run()
		want := []uint64{0x1000, 0x1001, 0x1002, 0x1003, 0x1004, 0x2000, 0x1005}
		if err != nil || end != fp.EndFinal || fmt.Sprint(pcs(fs)) != fmt.Sprint(want) {
			t.Errorf("%v: %x %v %v, want %x final", abi, pcs(fs), end, err, want)
		}
		if fs[len(fs)-1].Raw != 0x2525000000001005 {
			t.Errorf("%v: raw of the signed lr %#x", abi, fs[len(fs)-1].Raw)
		}
		if fs[2].Stack != fp.IRQ || fs[3].Stack != fp.Task {
			t.Errorf("%v: stacks %v %v", abi, fs[2].Stack, fs[3].Stack)
		}
		for i, f := range fs {
			if (f.Origin == fp.OriginRegsPC) != (i == 5) {
				t.Errorf("%v: frame %d %#x origin %v", abi, i, f.PC, f.Origin)
			}
		}
	}
}

func TestWalkRules(t *testing.T) {
	for _, c := range []struct {
		name string
		abi  fp.ABI
		mod  func(m *wordMem, w *Walk)
		rule string
		n    int
	}{
		{"misaligned", fp.ABIFinalRecord, func(m *wordMem, w *Walk) { m.set(irqLo+0x3f00, irqLo+0x3f44) }, "misaligned fp", 2},
		{"not increasing", fp.ABIFinalRecord, func(m *wordMem, w *Walk) { m.set(irqLo+0x3f40, irqLo+0x3f00) }, fp.RuleFPNotIncreasing, 3},
		{"re-entered", fp.ABIFinalRecord, func(m *wordMem, w *Walk) { m.set(taskLo+0x3000, irqLo+0x3f80) }, "stack re-entered", 4},
		{"outside", fp.ABIFinalRecord, func(m *wordMem, w *Walk) { m.set(taskLo+0x3000, 0x50000) }, "fp outside stacks", 4},
		{"final elsewhere", fp.ABIFinalRecord, func(m *wordMem, w *Walk) { w.TaskPtRegs = 0 }, "fp outside stacks", 8},
		{"bad meta type", fp.ABIMetaRecord, func(m *wordMem, w *Walk) { m.set(taskLo+0x3140+320, 7) }, "bad meta record type", 5},
		{"final not at task pt_regs", fp.ABIMetaRecord, func(m *wordMem, w *Walk) { w.TaskPtRegs -= 16 }, "final record not at task pt_regs", 7},
	} {
		m, w := chain(c.abi)
		c.mod(m, w)
		fs, end, err := w.Run()
		var ce *errs.CorruptError
		if end != fp.EndError || !errors.As(err, &ce) || ce.Rule != c.rule || len(fs) != c.n {
			t.Errorf("%s: %d frames, %v, %v; want %d frames and rule %q", c.name, len(fs), end, err, c.n, c.rule)
		}
	}
}

func TestWalkLRAtEntry(t *testing.T) {
	_, w := chain(fp.ABIFinalRecord)
	w.LR = 0x0fff
	fs, _, err := w.Run()
	if err != nil || len(fs) != 8 || fs[1].PC != 0x0fff || fs[1].Origin != fp.OriginLR {
		t.Fatalf("%x %v", pcs(fs), err)
	}
}

func testLayout(t *testing.T) ptrauth.Layout {
	t.Helper()
	return ptrauth.NewLayout(48, false)
}

func TestWalkNeedsABI(t *testing.T) {
	_, w := chain(fp.ABIFinalRecord)
	w.ABI = 0
	if fs, end, err := w.Run(); err == nil || end != fp.EndError || len(fs) != 0 {
		t.Fatalf("%d frames, %v, %v", len(fs), end, err)
	}
}

// errUnmapped is what holeMem returns for its hole.
var errUnmapped = errors.New("unmapped")

// holeMem is wordMem with one unreadable range [lo, hi).
type holeMem struct {
	*wordMem
	lo, hi uint64
}

func (m *holeMem) ReadVirt(b []byte, va uint64) error {
	if va < m.hi && va+uint64(len(b)) > m.lo {
		return fmt.Errorf("va %#x: %w", va, errUnmapped)
	}
	return m.wordMem.ReadVirt(b, va)
}

// A record in a page the dump does not hold fails the walk with the read
// error and the frames before it, under both ABIs (the stack is read
// into bytes first; the missing page must not walk as zeros).
func TestWalkUnreadable(t *testing.T) {
	for _, c := range []struct {
		lo, hi uint64
		n      int
	}{
		{irqLo + 0x3000, irqLo + 0x4000, 1}, // the first record
		{taskLo + 0x3000, taskLo + 0x4000, 3},
	} {
		for _, abi := range []fp.ABI{fp.ABIFinalRecord, fp.ABIMetaRecord} {
			m, w := chain(abi)
			w.Mem = &holeMem{m, c.lo, c.hi}
			fs, end, err := w.Run()
			if end != fp.EndError || !errors.Is(err, errUnmapped) || len(fs) != c.n {
				t.Errorf("%v hole [%#x, %#x): %x %v %v, want %d frames and the read error", abi, c.lo, c.hi, pcs(fs), end, err, c.n)
			}
		}
	}
	// A hole the walk never reads changes nothing.
	m, w := chain(fp.ABIFinalRecord)
	w.Mem = &holeMem{m, taskLo, taskLo + 0x1000}
	if fs, end, err := w.Run(); err != nil || end != fp.EndFinal || len(fs) != 7 {
		t.Errorf("unread hole: %x %v %v", pcs(fs), end, err)
	}
}

// Run reads the stacks once and walks the same bytes again; new Stacks
// are read anew.
func TestWalkReadsOnce(t *testing.T) {
	m, w := chain(fp.ABIFinalRecord)
	fs1, _, _ := w.Run()
	m.set(irqLo+0x3f08, 0x9999) // after the first Run: not seen
	fs2, _, _ := w.Run()
	if fmt.Sprint(pcs(fs1)) != fmt.Sprint(pcs(fs2)) {
		t.Fatalf("second Run %x, first %x", pcs(fs2), pcs(fs1))
	}
	w.Stacks = append([]Stack(nil), w.Stacks...)
	w.Stacks[1].How = "again"
	if fs3, _, _ := w.Run(); fs3[1].PC != 0x9999 {
		t.Fatalf("new Stacks walked the old bytes: %x", pcs(fs3))
	}
}
