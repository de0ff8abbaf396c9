package scs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/unwindkit/unwindkit/ptrauth"
)

// Values pushed by the concurrent test depend only on (task, context,
// depth), so a slot always holds the same value at the same depth and any
// snapshot of a stack is recognisable. They carry a fake PAC in bits 48-50
// (48-bit layout, no TBI: those bits are PAC field) that Save must strip.
func concValue(task int, c Context, depth int) uint64 {
	return 0xffff800000000000 | uint64(task)<<28 | uint64(c)<<24 | uint64(depth)*4
}

func concSigned(task int, c Context, depth int) uint64 {
	return concValue(task, c, depth) ^ uint64(depth%7+1)<<48
}

const concPCMark = 0xffff8000f0000000

func concPC(c Context) uint64 { return concPCMark | uint64(c) }

// checkConcurrentTrace checks that got is a prefix of a trace some state
// of the CPU could have (with KeepInterruptedPC): runs of consecutive
// depths down to 0 per context, each followed by its context's
// interrupted-PC marker, contexts strictly outward (a context with no
// entries contributes only its marker), all task entries from one task,
// every entry stripped.
func checkConcurrentTrace(got []uint64, full bool) error {
	const (
		none = iota
		run
		marker
	)
	last, lastCtx := none, Context(0)
	depth := -1 // next depth expected in the open run, -1 if none is open
	task := -1
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
		if v>>48 != 0xffff || v&0x3 != 0 {
			return fmt.Errorf("frame %d: %#x is not a stripped entry (%x)", i, v, got)
		}
		c := Context(v >> 24 & 0xf)
		d := int(v&0xffffff) / 4
		if depth < 0 { // a new run
			if last == run || last == marker && c >= lastCtx {
				return fmt.Errorf("frame %d: run of %s after %s (%x)", i, c, lastCtx, got)
			}
		} else if c != lastCtx || d != depth {
			return fmt.Errorf("frame %d: %s depth %d, want %s depth %d (%x)", i, c, d, lastCtx, depth, got)
		}
		if c == CtxTask {
			if t := int(v >> 28 & 0xff); task >= 0 && t != task {
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
	ops := 20000
	if testing.Short() {
		ops = 3000
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
			var saves atomic.Int64
			var readers sync.WaitGroup
			for k := range 3 {
				readers.Add(1)
				go func() {
					defer readers.Done()
					buf := make([]uint64, 40)
					for i := 0; !done.Load() || i < 10; i++ {
						cpu := (i + k) % ncpu
						size := 5 + i%len(buf[5:])
						n, err := m.Save(cpu, buf[:size], 0)
						saves.Add(1)
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
			t.Logf("%d saves", saves.Load())
			if saves.Load() == 0 {
				t.Fatal("no saves")
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
	for range ops {
		c := top()
		d := depth[c]
		if c == CtxTask {
			d = taskDepth[curTask]
		}
		switch x := rng.IntN(20); {
		case x < 8 && d < capacity:
			if err := m.Push(cpu, concSigned(curTask, c, d)); err != nil {
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
		{concValue(1, CtxTask, 2), concValue(1, CtxTask, 1), concValue(1, CtxTask, 0)},
		{concValue(0, CtxIRQ, 1), concValue(0, CtxIRQ, 0), concPC(CtxIRQ), concValue(0, CtxTask, 0)},
		{concPC(CtxIRQ), concValue(0, CtxTask, 0)},
		{concValue(0, CtxSDEICritical, 0), concPC(CtxSDEICritical), concPC(CtxSDEINormal), concValue(0, CtxIRQ, 0)},
	}
	for _, g := range ok {
		if err := checkConcurrentTrace(g, false); err != nil {
			t.Errorf("valid trace rejected: %v", err)
		}
	}
	bad := [][]uint64{
		{concValue(1, CtxTask, 2), concValue(1, CtxTask, 0)},                       // gap
		{concValue(1, CtxTask, 1)},                                                 // unfinished run
		{concValue(0, CtxTask, 0), concValue(0, CtxIRQ, 0)},                        // inward
		{concValue(0, CtxIRQ, 1), concPC(CtxIRQ)},                                  // marker mid-run
		{concValue(0, CtxIRQ, 0), concPC(CtxSDEINormal), concValue(0, CtxTask, 0)}, // marker of an inner context
		{concSigned(0, CtxTask, 0)},                                                // not stripped
	}
	for _, g := range bad {
		if err := checkConcurrentTrace(g, false); err == nil {
			t.Errorf("invalid trace accepted: %x", g)
		}
	}
}
