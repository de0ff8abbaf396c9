// Readers of a running model: the snapshot under the sequence lock, View, TaskView and Model.Save.

package scs

import "runtime"

// snapshot is the per-CPU state View reads under the sequence lock.
type snapshot struct {
	active, x18 uint64
	task        *Task
	base, pc    [NumContexts]uint64
	// from, top, addr: where entering each context kept the interrupted
	// x18 (peekX18).
	from      [NumContexts]Where
	top, addr [NumContexts]uint64
	gen       [NumContexts]uint64 // each stack's life generation, read before any top
}

// read fills s under cpu's sequence lock. It gives up, returning false,
// after readTries attempts that found a change in progress (a driver that
// never closes its Begin must not hang every reader).
func (m *Model) read(cpu int, s *snapshot) bool {
	for try := 0; try < readTries; try++ {
		s1 := m.seq.Load(cpu)
		if s1&1 != 0 {
			runtime.Gosched()
			continue
		}
		// The generations first, then the tops (see life): a push that
		// lands between them makes the copy report ErrChanged rather
		// than go unnoticed.
		s.task = m.cur.Ptr(cpu).Load()
		s.gen[CtxTask] = s.task.life.gen.Load()
		ls := m.lives.Ptr(cpu)
		for c := CtxIRQ; c < NumContexts; c++ {
			s.gen[c] = ls[c].gen.Load()
		}
		s.active = m.active.Load(cpu)
		s.x18 = m.x18.Load(cpu)
		for c := CtxIRQ; c < NumContexts; c++ {
			s.base[c] = m.base[c].Load(cpu)
			s.from[c], s.top[c], s.addr[c] = m.peekX18(cpu, c, s.task)
			s.pc[c] = m.pc[c].Load(cpu)
		}
		if m.seq.Load(cpu) == s1 {
			return true
		}
	}
	return false
}

// readTries bounds read's attempts; each one that finds a change in
// progress yields the processor first.
const readTries = 1 << 16

// View returns a consistent snapshot of cpu's shadow stacks for Save and
// Frames: one Segment per live context, innermost first. It may be called
// from any goroutine while cpu's driver keeps running. The View describes
// the stacks at one instant and carries each stack's life generation at
// that instant (see "Reading a running model" in the package doc): Save
// and Frames on it return what the stacks held at that instant, or
// ErrChanged once the driver has rewritten a slot the View covers. View
// itself returns ErrChanged if it found a change in progress on every one
// of many attempts (a driver's Begin left open). When the SCS is disabled
// the View has Disabled set.
func (m *Model) View(cpu int) (View, error) {
	var v View
	err := m.ViewInto(cpu, &v)
	return v, err
}

// ViewInto is View writing into *v, which it overwrites entirely; it
// saves copying a View on hot paths.
func (m *Model) ViewInto(cpu int, v *View) error {
	// Field by field rather than *v = View{...}, which builds the whole
	// View on the stack and copies it.
	v.Layout = m.cfg.Layout
	v.Disabled, v.StopAtBoundary, v.N = false, false, 0
	if err := m.check(cpu); err != nil {
		clear(v.Segs[:])
		return err
	}
	if m.cfg.Disabled {
		clear(v.Segs[:])
		v.Disabled = true
		return nil
	}
	var s snapshot
	if !m.read(cpu, &s) {
		clear(v.Segs[:])
		return ErrChanged
	}
	rs := m.stacks.Ptr(cpu)
	// Live contexts, innermost first.
	var live [NumContexts]Context
	n := 0
	for c := CtxSDEICritical; c > CtxTask; c-- {
		if s.active&(1<<c) != 0 {
			live[n] = c
			n++
		}
	}
	live[n] = CtxTask
	n++
	clear(v.Segs[n:])
	top, from, addr, hidden := s.x18, InRegister, uint64(0), false
	for i := 0; i < n; i++ {
		c := live[i]
		seg := &v.Segs[i]
		seg.Context = c
		seg.Data = nil
		seg.Size = m.cfg.Size
		seg.Magic = true
		if c == CtxTask {
			seg.words, seg.Base = s.task.st.words, s.task.st.base
			seg.gen = &s.task.life.gen
		} else {
			seg.words, seg.Base = rs[c].words, rs[c].base
			seg.gen = &m.lives.Ptr(cpu)[c].gen
		}
		seg.genWant = s.gen[c]
		seg.Top, seg.TopFrom, seg.TopAddr, seg.Hidden = top, from, addr, hidden
		seg.InterruptedPC, seg.HasInterruptedPC = 0, false
		if c == CtxTask {
			break
		}
		// Where entering c left the interrupted context's x18.
		from, top, addr = s.from[c], s.top[c], s.addr[c]
		hidden = from.Hidden()
		if m.cfg.KeepInterruptedPC {
			seg.InterruptedPC, seg.HasInterruptedPC = s.pc[c], true
		}
	}
	v.N = n
	return nil
}

// TaskView returns a View of task t's shadow stack as t left it when it
// last stopped running (its thread_info.scs_sp): one segment, Top from
// InThreadInfo, re-checked like any View of the model (a task that runs
// again and rewrites the slots makes Save return ErrChanged). For the
// task current on a CPU use View. When the SCS is disabled the View has
// Disabled set.
func (m *Model) TaskView(t *Task) View {
	v := View{Layout: m.cfg.Layout, N: 1}
	if m.cfg.Disabled || t == nil {
		v.Disabled = m.cfg.Disabled
		v.N = 0
		return v
	}
	gen := t.life.gen.Load() // before the top, as View reads them
	v.Segs[0] = Segment{Context: CtxTask, words: t.st.words, Base: t.base, Size: m.cfg.Size, Magic: true,
		Top: t.sp.Load(), TopFrom: InThreadInfo, gen: &t.life.gen, genWant: gen}
	return v
}

// Save is View followed by the package-level Save on cpu, retried while
// the copy reports ErrChanged (at most saveTries times; then it returns 0
// and ErrChanged). What it returns is cpu's shadow stacks at one instant.
func (m *Model) Save(cpu int, store []uint64, skip int) (int, error) {
	var v View
	for try := 0; ; try++ {
		if err := m.ViewInto(cpu, &v); err != nil {
			return 0, err
		}
		n, err := Save(&v, store, skip)
		if err != ErrChanged || try+1 == saveTries {
			return n, err
		}
		runtime.Gosched()
	}
}

// saveTries bounds Model.Save's retries.
const saveTries = 100
