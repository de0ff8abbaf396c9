package scs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/unwindkit/unwindkit/ptrauth"
)

// Values pushed by the concurrent test carry the pushing CPU's
// ever-increasing push counter besides (task, context, depth): bits 11-46
// count, 9-10 task, 7-8 context, 2-6 depth, bit 47 clear. A slot
// therefore names the lifetime of the stack it was written in: at any
// instant the counters of a stack rise from its base to its top, and an
// interrupted context's entries are older than the interrupting ones, so a
// trace (innermost first) that is the CPU's stack at one instant has
// strictly falling counters. A copy that mixes two lifetimes (a slot
// rewritten after the copy started) shows a counter that falls and then
// jumps up. They carry a fake PAC in bits 48-50 (48-bit layout, no TBI:
// those bits are PAC field) that Save must strip.
func concValue(task int, c Context, depth int, count uint64) uint64 {
	return 0xffff000000000000 | count<<11 | uint64(task)<<9 | uint64(c)<<7 | uint64(depth)<<2
}

func concSigned(task int, c Context, depth int, count uint64) uint64 {
	return concValue(task, c, depth, count) ^ uint64(depth%7+1)<<48
}

const concPCMark = 0xffff8000f0000000

func concPC(c Context) uint64 { return concPCMark | uint64(c) }

// checkConcurrentTrace checks that got is a prefix of a trace some state
// of the CPU could have (with KeepInterruptedPC): runs of consecutive
// depths down to 0 per context, each followed by its context's
// interrupted-PC marker, contexts strictly outward (a context with no
// entries contributes only its marker), all task entries from one task,
// push counters strictly falling (one lifetime of each stack), every entry
// stripped.
func checkConcurrentTrace(got []uint64, full bool) error {
	const (
		none = iota
		run
		marker
	)
	last, lastCtx := none, Context(0)
	depth := -1 // next depth expected in the open run, -1 if none is open
	task := -1
	prev := uint64(1) << 36 // above every counter
	for i, v := range got {
		if v&^0xf == concPCMark {
			c := Context(v & 0xf)
			switch {
			case depth >= 0:
				return fmt.Errorf("frame %d: marker inside a run (%x)", i, got)
			case c == CtxTask || c >= NumContexts:
				return fmt.Errorf("frame %d: marker for %s (%x)", i, c, got)
			case last == run && c != lastCtx, last == marker && c >= lastCtx:
				return fmt.Errorf("frame %d: marker for %s after %s (%x)", i, c, lastCtx, got)
			}
			last, lastCtx = marker, c
			continue
		}
		if v>>47 != 0x1fffe || v&0x3 != 0 {
			return fmt.Errorf("frame %d: %#x is not a stripped entry (%x)", i, v, got)
		}
		c := Context(v >> 7 & 0x3)
		d := int(v>>2) & 0x1f
		if n := v >> 11 & (1<<36 - 1); n >= prev {
			return fmt.Errorf("frame %d: push counter %d after %d: a mix of two lifetimes of the stack (%x)", i, n, prev, got)
		} else {
			prev = n
		}
		if depth < 0 { // a new run
			if last == run || last == marker && c >= lastCtx {
				return fmt.Errorf("frame %d: run of %s after %s (%x)", i, c, lastCtx, got)
			}
		} else if c != lastCtx || d != depth {
			return fmt.Errorf("frame %d: %s depth %d, want %s depth %d (%x)", i, c, d, lastCtx, depth, got)
		}
		if c == CtxTask {
			if t := int(v >> 9 & 0x3); task >= 0 && t != task {
				return fmt.Errorf("frame %d: task %d after task %d", i, t, task)
			} else {
				task = t
			}
		}
		last, lastCtx, depth = run, c, d-1
	}
	if !full && depth >= 0 {
		return fmt.Errorf("trace ends inside a run (%x)", got)
	}
	return nil
}

func TestConcurrentSave(t *testing.T) {
	// At 1,000,000 operations per CPU the mixed-trace check failed 10 runs
	// out of 10 on the code before life generations (ErrChanged).
	ops := 1000000
	switch {
	case testing.Short():
		ops = 3000
	case raceEnabled:
		ops = 100000
	}
	for _, p := range Policies {
		t.Run(p.String(), func(t *testing.T) {
			const ncpu = 2
			r := newRig(t, Config{Policy: p, NumCPU: ncpu, KeepInterruptedPC: true, Size: 256, Layout: ptrauth.NewLayout(48, false)})
			m := r.m
			// Three tasks per CPU, all created before anything runs.
			tasks := make([][]*Task, ncpu)
			for cpu := range ncpu {
				for k := range 3 {
					tk, err := m.NewTask(fmt.Sprintf("t%d.%d", cpu, k))
					if err != nil {
						t.Fatal(err)
					}
					tasks[cpu] = append(tasks[cpu], tk)
				}
			}
			var done atomic.Bool
			var wg sync.WaitGroup
			errc := make(chan error, 16)
			var saves, nonEmpty atomic.Int64
			var changed [3]atomic.Int64 // ErrChanged results per reader
			var readers sync.WaitGroup
			for k := range 3 {
				readers.Add(1)
				go func() {
					defer readers.Done()
					buf := make([]uint64, 40)
					again := make([]uint64, 40)
					var v View
					for i := 0; !done.Load() || i < 10; i++ {
						cpu := (i + k) % ncpu
						size := 5 + i%len(buf[5:])
						var n int
						var err error
						if k == 2 {
							// scs.Save over a View of the running CPU,
							// twice: each copy is the stack at the
							// View's instant, so both are equal.
							// ViewInto itself may give up with
							// ErrChanged when the driver is mid-change
							// on every try (a preempted driver under
							// load): counted below like a copy's.
							if err = m.ViewInto(cpu, &v); err != nil && err != ErrChanged {
								errc <- err
								return
							}
							if err == nil {
								n, err = Save(&v, buf[:size], 0)
							}
							if err == nil {
								runtime.Gosched()
								n2, err2 := Save(&v, again[:size], 0)
								if err2 == nil && !slices.Equal(buf[:n], again[:n2]) {
									errc <- fmt.Errorf("cpu %d: two copies of one View differ:\n%x\n%x", cpu, buf[:n], again[:n2])
									return
								}
							}
						} else {
							n, err = m.Save(cpu, buf[:size], 0)
						}
						saves.Add(1)
						if err == ErrChanged {
							// The driver rewrote a slot the View
							// covers: no frames, and counted.
							changed[k].Add(1)
							if n != 0 {
								errc <- fmt.Errorf("cpu %d: ErrChanged with %d frames", cpu, n)
								return
							}
							continue
						}
						if n > 0 {
							nonEmpty.Add(1)
						}
						if err != nil && !(p == OnStack && errors.Is(err, ErrInterruptedTopHidden)) {
							errc <- fmt.Errorf("cpu %d: %v", cpu, err)
							return
						}
						if err := checkConcurrentTrace(buf[:n], n == size); err != nil {
							errc <- fmt.Errorf("cpu %d: %v", cpu, err)
							return
						}
					}
				}()
			}
			for cpu := range ncpu {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for saves.Load() < 3 { // overlap with the readers
						runtime.Gosched()
					}
					if err := driveCPU(r, cpu, tasks[cpu], ops); err != nil {
						errc <- err
					}
				}()
			}
			wg.Wait()
			done.Store(true)
			readers.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			t.Logf("%d saves, %d non-empty; ErrChanged: Model.Save %d, %d; Save of a View %d",
				saves.Load(), nonEmpty.Load(), changed[0].Load(), changed[1].Load(), changed[2].Load())
			if nonEmpty.Load() == 0 {
				t.Fatal("no save returned frames")
			}
		})
	}
}

// driveCPU performs a random walk of pushes, pops, entries, exits and
// switches on cpu, pushing concSigned values.
func driveCPU(r *rig, cpu int, tasks []*Task, ops int) error {
	m := r.m
	rng := rand.New(rand.NewPCG(uint64(cpu), 7))
	var nest []Context
	depth := map[Context]int{}
	curTask := -1
	taskDepth := make([]int, len(tasks))
	if err := m.Switch(cpu, tasks[0]); err != nil {
		return err
	}
	curTask = 0
	top := func() Context {
		if len(nest) == 0 {
			return CtxTask
		}
		return nest[len(nest)-1]
	}
	capacity := int(m.Config().Size/8 - 1)
	var count uint64 // pushes so far on this CPU
	for range ops {
		c := top()
		d := depth[c]
		if c == CtxTask {
			d = taskDepth[curTask]
		}
		switch x := rng.IntN(20); {
		case x < 8 && d < capacity:
			count++
			if err := m.Push(cpu, concSigned(curTask, c, d, count)); err != nil {
				return err
			}
			d++
		case x < 14 && d > 0:
			if _, err := m.Pop(cpu); err != nil {
				return err
			}
			d--
		case x == 14 && c == CtxTask:
			if err := r.enterIRQ(cpu, concPC(CtxIRQ)); err != nil {
				return err
			}
			nest = append(nest, CtxIRQ)
			depth[CtxIRQ] = 0
		case x == 15 && c < CtxSDEINormal:
			if err := m.EnterSDEI(cpu, false, 0, concPC(CtxSDEINormal)); err != nil {
				return err
			}
			nest = append(nest, CtxSDEINormal)
			depth[CtxSDEINormal] = 0
		case x == 16 && c < CtxSDEICritical:
			if err := m.EnterSDEI(cpu, true, 0, concPC(CtxSDEICritical)); err != nil {
				return err
			}
			nest = append(nest, CtxSDEICritical)
			depth[CtxSDEICritical] = 0
		case x >= 17 && x < 19 && c != CtxTask:
			var err error
			if c == CtxIRQ {
				err = r.exitIRQ(cpu)
			} else {
				err = m.ExitSDEI(cpu)
			}
			if err != nil {
				return err
			}
			nest = nest[:len(nest)-1]
			continue
		case x == 19 && c == CtxTask:
			next := rng.IntN(len(tasks))
			if err := m.Switch(cpu, tasks[next]); err != nil {
				return err
			}
			curTask = next
			continue
		}
		if c == CtxTask {
			taskDepth[curTask] = d
		} else {
			depth[c] = d
		}
	}
	return nil
}

func TestCheckConcurrentTrace(t *testing.T) {
	ok := [][]uint64{
		{},
		{concValue(1, CtxTask, 2, 9), concValue(1, CtxTask, 1, 5), concValue(1, CtxTask, 0, 1)},
		{concValue(0, CtxIRQ, 1, 30), concValue(0, CtxIRQ, 0, 20), concPC(CtxIRQ), concValue(0, CtxTask, 0, 3)},
		{concPC(CtxIRQ), concValue(0, CtxTask, 0, 1)},
		{concValue(0, CtxSDEICritical, 0, 8), concPC(CtxSDEICritical), concPC(CtxSDEINormal), concValue(0, CtxIRQ, 0, 7)},
	}
	for _, g := range ok {
		if err := checkConcurrentTrace(g, false); err != nil {
			t.Errorf("valid trace rejected: %v", err)
		}
	}
	bad := [][]uint64{
		{concValue(1, CtxTask, 2, 9), concValue(1, CtxTask, 0, 1)},                               // gap
		{concValue(1, CtxTask, 1, 9)},                                                            // unfinished run
		{concValue(0, CtxTask, 0, 9), concValue(0, CtxIRQ, 0, 8)},                                // inward
		{concValue(0, CtxIRQ, 1, 9), concPC(CtxIRQ)},                                             // marker mid-run
		{concValue(0, CtxIRQ, 0, 9), concPC(CtxSDEINormal), concValue(0, CtxTask, 0, 1)},         // marker of an inner context
		{concSigned(0, CtxTask, 0, 1)},                                                           // not stripped
		{concValue(0, CtxTask, 2, 9), concValue(0, CtxTask, 1, 5), concValue(0, CtxTask, 0, 12)}, // falls then jumps: two lifetimes
		{concValue(0, CtxIRQ, 0, 4), concPC(CtxIRQ), concValue(0, CtxTask, 0, 6)},                // interrupted entry newer than the IRQ's
		{concValue(0, CtxTask, 1, 5), concValue(0, CtxTask, 0, 5)},                               // a counter repeats
	}
	for _, g := range bad {
		if err := checkConcurrentTrace(g, false); err == nil {
			t.Errorf("invalid trace accepted: %x", g)
		}
	}
}

// TestViewGenerations drives the life generations deterministically: a
// View stays good while its stacks only grow or shrink, and reports
// ErrChanged as soon as a push rewrites a slot it covers.
func TestViewGenerations(t *testing.T) {
	r := newRig(t, Config{Policy: PerCPU, Layout: ptrauth.NewLayout(48, false)})
	m := r.m
	for i := range 3 {
		mustPush(t, m, 0, retAddr(CtxTask, i))
	}
	want := []uint64{retAddr(CtxTask, 2), retAddr(CtxTask, 1), retAddr(CtxTask, 0)}
	v, err := m.View(0)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, wantErr error) {
		t.Helper()
		buf := make([]uint64, 8)
		n, err := Save(&v, buf, 0)
		if err != wantErr {
			t.Fatalf("%s: Save: %d, %v; want %v", step, n, err, wantErr)
		}
		if err == nil && !slices.Equal(buf[:n], want) {
			t.Fatalf("%s: Save = %x, want %x", step, buf[:n], want)
		}
		fs := make([]Frame, 8)
		if n, err := framesInto(&v, fs, 0); err != wantErr || (err == nil && n != len(want)) {
			t.Fatalf("%s: Frames: %d, %v; want %v", step, n, err, wantErr)
		}
	}
	check("unchanged", nil)
	mustPush(t, m, 0, retAddr(CtxTask, 10)) // above the View's top
	check("push above", nil)
	if _, err := m.Pop(0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pop(0); err != nil {
		t.Fatal(err)
	}
	check("pops", nil) // popped slots keep their values
	if err := r.enterIRQ(0, 1); err != nil {
		t.Fatal(err)
	}
	mustPush(t, m, 0, retAddr(CtxIRQ, 0)) // another stack
	check("irq push", nil)
	if err := r.exitIRQ(0); err != nil {
		t.Fatal(err)
	}
	mustPush(t, m, 0, retAddr(CtxTask, 11)) // rewrites slot 2
	check("rewrite", ErrChanged)
	if n, err := m.Save(0, make([]uint64, 8), 0); n != 3 || err != nil {
		t.Fatalf("Model.Save after the rewrite: %d, %v", n, err)
	}

	// An IRQ View is stale after the IRQ exits and a new one pushes.
	if err := r.enterIRQ(0, 1); err != nil {
		t.Fatal(err)
	}
	mustPush(t, m, 0, retAddr(CtxIRQ, 5))
	v, _ = m.View(0)
	want = []uint64{retAddr(CtxIRQ, 5), retAddr(CtxTask, 11), retAddr(CtxTask, 1), retAddr(CtxTask, 0)}
	check("irq view", nil)
	r.exitIRQ(0)
	check("irq exited", nil)
	r.enterIRQ(0, 1)
	mustPush(t, m, 0, retAddr(CtxIRQ, 6))
	check("irq re-entered", ErrChanged)

	// A View over caller memory is never re-checked.
	sv := v
	for i := range sv.Segs {
		sv.Segs[i].gen = nil
	}
	if n, err := Save(&sv, make([]uint64, 8), 0); err != nil || n == 0 {
		t.Fatalf("View without generations: %d, %v", n, err)
	}
}
