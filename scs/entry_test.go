package scs

import (
	"errors"
	"testing"
)

// TestBeginEndNest: a driver's Begin/End around several model calls is
// one change of the CPU's sequence: odd throughout (the model's own
// brackets inside do not close it), even and two further on after End. An
// End without Begin and an out-of-range CPU change nothing.
func TestBeginEndNest(t *testing.T) {
	r := newRig(t, Config{Policy: PerCPU, NumCPU: 2})
	m := r.m
	s0 := m.seqOf(0)
	if s0%2 != 0 {
		t.Fatalf("idle seq %d is odd", s0)
	}
	m.beginStep(0)
	if m.seqOf(0) != s0+1 {
		t.Fatalf("after Begin: seq %d, want %d", m.seqOf(0), s0+1)
	}
	mustOK(t, m.Push(0, 0x1000))
	mustOK(t, r.enterIRQ(0, 0x2000))
	if m.seqOf(0) != s0+1 {
		t.Fatalf("EnterIRQ inside Begin moved seq to %d, want %d", m.seqOf(0), s0+1)
	}
	m.beginStep(0) // nested
	mustOK(t, m.Push(0, 0x3000))
	m.endStep(0)
	if m.seqOf(0) != s0+1 {
		t.Fatalf("inner End closed the change: seq %d", m.seqOf(0))
	}
	m.endStep(0)
	if m.seqOf(0) != s0+2 {
		t.Fatalf("after End: seq %d, want %d", m.seqOf(0), s0+2)
	}
	m.endStep(0) // unbalanced: ignored
	m.beginStep(5)
	m.endStep(-1)
	if m.seqOf(0) != s0+2 || m.seqOf(1) != 0 || m.seqOf(5) != 0 {
		t.Fatalf("unbalanced End or bad CPU changed seq: %d %d", m.seqOf(0), m.seqOf(1))
	}
	// Outside Begin, each entry or exit is its own change.
	mustOK(t, r.exitIRQ(0))
	if m.seqOf(0) != s0+4 {
		t.Fatalf("ExitIRQ: seq %d, want %d", m.seqOf(0), s0+4)
	}
}

// TestViewGivesUpOnOpenBegin: a driver that never closes its Begin makes
// View and Model.Save return ErrChanged instead of hanging its readers;
// after End they work again.
func TestViewGivesUpOnOpenBegin(t *testing.T) {
	r := newRig(t, Config{})
	m := r.m
	mustOK(t, m.Push(0, 0x1234))
	m.beginStep(0)
	if _, err := m.View(0); !errors.Is(err, ErrChanged) {
		t.Fatalf("View during an open Begin: %v, want ErrChanged", err)
	}
	store := make([]uint64, 4)
	if n, err := m.Save(0, store, 0); n != 0 || !errors.Is(err, ErrChanged) {
		t.Fatalf("Save during an open Begin: %d, %v", n, err)
	}
	m.endStep(0)
	if n, err := m.Save(0, store, 0); n != 1 || err != nil || store[0] != 0x1234 {
		t.Fatalf("Save after End: %d %v %#x", n, err, store[0])
	}
}

// TestCheckEnterExit: CheckEnter and CheckExit state the nesting rules the
// entries and exits enforce, and agree with them in every state.
func TestCheckEnterExit(t *testing.T) {
	r := newRig(t, Config{Policy: ThreadInfo})
	m := r.m
	enter := map[Context]func() error{
		CtxIRQ:          func() error { return r.enterIRQ(0, 1) },
		CtxSDEINormal:   func() error { return m.EnterSDEI(0, false, 0, 2) },
		CtxSDEICritical: func() error { return m.EnterSDEI(0, true, 0, 3) },
	}
	exit := map[Context]func() error{
		CtxIRQ:          func() error { return r.exitIRQ(0) },
		CtxSDEINormal:   func() error { return m.ExitSDEI(0) },
		CtxSDEICritical: func() error { return m.ExitSDEI(0) },
	}
	// Every path of up to three entries from the task.
	var walk func(depth int)
	walk = func(depth int) {
		in := m.Context(0)
		for c := CtxIRQ; c < NumContexts; c++ {
			want := m.checkEnter(0, c)
			if want != nil && !errors.Is(want, ErrNesting) {
				t.Fatalf("CheckEnter(%s) in %s: %v, not ErrNesting", c, in, want)
			}
			if want != nil || depth == 3 {
				if want != nil {
					seq := m.seqOf(0)
					if err := enter[c](); !errors.Is(err, ErrNesting) || m.seqOf(0) != seq {
						t.Fatalf("entering %s in %s: %v (CheckEnter said %v), seq %d -> %d", c, in, err, want, seq, m.seqOf(0))
					}
				}
				continue
			}
			mustOK(t, enter[c]())
			if m.Context(0) != c {
				t.Fatalf("entered %s from %s: context %s", c, in, m.Context(0))
			}
			for x := CtxTask; x < NumContexts; x++ {
				if err := m.checkExit(0, x); (err == nil) != (x == c) {
					t.Fatalf("in %s: CheckExit(%s) = %v", c, x, err)
				}
			}
			walk(depth + 1)
			mustOK(t, exit[c]())
			if m.Context(0) != in {
				t.Fatalf("left %s: context %s, want %s", c, m.Context(0), in)
			}
		}
	}
	walk(0)
	if err := m.checkEnter(0, CtxTask); !errors.Is(err, ErrNesting) {
		t.Errorf("CheckEnter(task): %v", err)
	}
	if err := m.checkEnter(7, CtxIRQ); err == nil {
		t.Error("CheckEnter on CPU 7 of 1 accepted")
	}
}

func mustOK(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
