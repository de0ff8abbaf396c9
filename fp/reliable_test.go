package fp

import (
	"errors"
	"slices"
	"testing"
)

// In reliable mode a trace is good only if the walk reached FINAL with the
// store never full, as stack_trace_save_tsk_reliable: its
// stack_trace_consume_entry returns false as soon as the store is full
// (even when the entry that filled it was the last one), and
// arch_stack_walk_reliable turns that into -EINVAL.
func TestReliableSaveStoreFull(t *testing.T) {
	m, s, want := taskChain(t, 5) // 6 frames: pc(0), pc(5) .. pc(1)
	c := m.config(s, pc(0))
	c.Reliable = true
	for _, skip := range []int{0, 1, 4} {
		frames := want[skip:]
		for size := 0; size <= len(frames)+1; size++ {
			store := make([]uint64, size)
			n, end, err := SaveEnd(c, store, skip)
			if got := store[:n]; !slices.Equal(got, frames[:min(size, len(frames))]) {
				t.Errorf("skip %d size %d: stored %x, want %x", skip, size, got, frames[:min(size, len(frames))])
			}
			if size > len(frames) {
				if end != EndFinal || err != nil {
					t.Errorf("skip %d size %d (room to spare): end %v err %v, want final <nil>", skip, size, end, err)
				}
				continue
			}
			// size == len(frames) is an exact fit: unreliable too.
			if end != EndStopped || !errors.Is(err, ErrUnreliable) || errors.Is(err, ErrCorrupt) {
				t.Errorf("skip %d size %d: end %v err %v, want stopped and ErrUnreliable", skip, size, end, err)
			}
			if n2, err2 := Save(c, store, skip); n2 != n || !errors.Is(err2, ErrUnreliable) {
				t.Errorf("Save skip %d size %d: %d %v", skip, size, n2, err2)
			}
		}
	}
	// Without Reliable a full store is not an error, and an exact fit
	// still reports the complete walk.
	c.Reliable = false
	for size, wantEnd := range map[int]End{3: EndStopped, 6: EndFinal, 7: EndFinal} {
		n, end, err := SaveEnd(c, make([]uint64, size), 0)
		if n != min(size, 6) || end != wantEnd || err != nil {
			t.Errorf("unreliable mode size %d: %d %v %v, want %d %v <nil>", size, n, end, err, min(size, 6), wantEnd)
		}
	}
}

// A store that fills up before the walk reaches an exception boundary must
// not hide the boundary: the walk never got to check the rest.
func TestReliableSaveStopsBeforeBoundary(t *testing.T) {
	m, _, irq := irqOnTask(t)
	c := m.config(irq, pc(0))
	c.Reliable = true
	before := []uint64{pc(0), pc(53), pc(52), pc(51)} // the frames before the pt_regs
	for size := 0; size <= 6; size++ {
		store := make([]uint64, size)
		n, err := Save(c, store, 0)
		if w := before[:min(size, len(before))]; !slices.Equal(store[:n], w) {
			t.Errorf("size %d: stored %x, want %x", size, store[:n], w)
		}
		if !errors.Is(err, ErrUnreliable) {
			t.Errorf("size %d: %d %v, want ErrUnreliable", size, n, err)
		}
	}
}

// Walk in reliable mode: a callback that stops the walk makes it
// unreliable; without Reliable stopping is no error.
func TestReliableWalkStopped(t *testing.T) {
	m, s, want := taskChain(t, 5)
	c := m.config(s, pc(0))
	for _, reliable := range []bool{false, true} {
		c.Reliable = reliable
		var got []uint64
		end, err := Walk(c, func(f Frame) bool { got = append(got, f.PC); return len(got) < len(want) })
		if !slices.Equal(got, want) || end != EndStopped {
			t.Fatalf("reliable %v: %x %v %v", reliable, got, end, err)
		}
		if reliable != errors.Is(err, ErrUnreliable) || (!reliable && err != nil) {
			t.Errorf("reliable %v: err %v", reliable, err)
		}
		// Unwinder.Stop is the same verdict.
		var u Unwinder
		u.Init(c)
		u.Next()
		u.Stop()
		if u.End() != EndStopped || reliable != errors.Is(u.Err(), ErrUnreliable) {
			t.Errorf("reliable %v: Stop gives %v %v", reliable, u.End(), u.Err())
		}
		// A callback that never stops: the complete walk is reliable.
		got = got[:0]
		end, err = Walk(c, func(f Frame) bool { got = append(got, f.PC); return true })
		if !slices.Equal(got, want) || end != EndFinal || err != nil {
			t.Errorf("reliable %v, full walk: %x %v %v", reliable, got, end, err)
		}
	}
}

// Frames in reliable mode yields an ErrUnreliable element when the walk
// breaks a reliability rule before the consumer stops, and none for a
// complete reliable walk.
func TestReliableFrames(t *testing.T) {
	m, _, irq := irqOnTask(t)
	c := m.config(irq, pc(0))
	c.Reliable = true
	var got []uint64
	var errsSeen []error
	for f, err := range Frames(c) {
		if err != nil {
			errsSeen = append(errsSeen, err)
			continue
		}
		got = append(got, f.PC)
	}
	if !slices.Equal(got, []uint64{pc(0), pc(53), pc(52), pc(51)}) || len(errsSeen) != 1 || !errors.Is(errsSeen[0], ErrUnreliable) {
		t.Fatalf("irq: %x %v", got, errsSeen)
	}
	m2, s, want := taskChain(t, 5)
	c2 := m2.config(s, pc(0))
	c2.Reliable = true
	got = got[:0]
	for f, err := range Frames(c2) {
		if err != nil {
			t.Fatalf("complete reliable walk yields %v", err)
		}
		got = append(got, f.PC)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("task chain: %x, want %x", got, want)
	}
}

// Config.Start accepts only the start origins; anything else is an error,
// for every way of running the walk.
func TestConfigStart(t *testing.T) {
	m, s, want := taskChain(t, 2)
	for _, tc := range []struct {
		start Origin
		ok    bool
		first Origin
	}{
		{OriginUnknown, true, OriginCaller},
		{OriginCaller, true, OriginCaller},
		{OriginTask, true, OriginTask},
		{OriginRegsPC, true, OriginRegsPC},
		{OriginFrame, false, 0},
		{OriginRegsPC + 1, false, 0},
		{255, false, 0},
	} {
		c := m.config(s, pc(0))
		c.Start = tc.start
		frames, end, err := walkAll(t, c)
		store := make([]uint64, 8)
		n, serr := Save(c, store, 0)
		if !tc.ok {
			if end != EndError || err == nil || len(frames) != 0 || n != 0 || serr == nil {
				t.Errorf("start %v: Walk %d frames %v %v, Save %d %v; want errors", tc.start, len(frames), end, err, n, serr)
			}
			continue
		}
		if err != nil || end != EndFinal || !slices.Equal(pcs(frames), want) || frames[0].Origin != tc.first || serr != nil || n != len(want) {
			t.Errorf("start %v: Walk %x %v %v (first %v), Save %d %v", tc.start, pcs(frames), end, err, frames[0].Origin, n, serr)
		}
	}
}
