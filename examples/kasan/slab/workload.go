package slab

import (
	"errors"
	"math/rand/v2"
)

// op is one step of the workload, run on a CPU in task context.
type op uint8

// The operations.
const (
	opAlloc op = iota
	opFree
	opRead
)

// Workload describes a random workload.
type Workload struct {
	// Ops is the number of task operations.
	Ops int
	// Seed seeds the workload's choices.
	Seed uint64
	// IRQ, SDEI and Switch are the per-op chances in percent that a hard
	// IRQ arrives at the innermost point of an op, that an SDEI event
	// arrives (in the task or inside the IRQ), and that the CPU switches
	// to another task before the op.
	IRQ, SDEI, Switch int
	// MaxLive is the number of live objects the workload aims at.
	MaxLive int
}

// DefaultWorkload is the workload examples/kasan and examples/compare run.
func DefaultWorkload(ops int) Workload {
	return Workload{Ops: ops, Seed: 1, IRQ: 25, SDEI: 5, Switch: 20, MaxLive: 512}
}

// Run runs w. Reports found (there should be none: the random workload
// only frees and reads objects it owns) are appended to Reports.
func (s *Sim) Run(w Workload) error {
	rng := rand.New(rand.NewPCG(w.Seed, w.Seed^0x9e3779b97f4a7c15))
	ncpu := len(s.running)
	for i := range ncpu {
		if s.running[i] < 0 {
			if err := s.run(i, i%len(s.tasks)); err != nil {
				return err
			}
		}
	}
	for range w.Ops {
		cpu := rng.IntN(ncpu)
		if rng.IntN(100) < w.Switch {
			// Switch to a task no CPU is running.
			ti := rng.IntN(len(s.tasks))
			free := true
			for c, r := range s.running {
				if r == ti && c != cpu {
					free = false
				}
			}
			if free {
				if err := s.run(cpu, ti); err != nil {
					return err
				}
			}
		}
		ts := s.current(cpu)
		kind := opAlloc
		switch r := rng.IntN(100); {
		case len(s.live) > w.MaxLive || (len(s.live) > 0 && r < 40):
			kind = opFree
		case len(s.live) > 0 && r < 60:
			kind = opRead
		}
		irq := rng.IntN(100) < w.IRQ
		sdei := rng.IntN(100) < w.SDEI
		pick := rng.Uint64()
		size := ts.allocSize - rng.IntN(16)
		var p path
		var act func() error
		switch kind {
		case opAlloc:
			p = ts.alloc
			act = func() error {
				a, err := s.kmalloc(cpu, size)
				s.live = append(s.live, a)
				return err
			}
		case opFree:
			p = ts.free
			act = func() error {
				if len(s.live) == 0 { // an IRQ took the last one
					return nil
				}
				return s.kfree(cpu, s.take(pick))
			}
		case opRead:
			p = ts.read
			act = func() error {
				if len(s.live) == 0 {
					return nil
				}
				return s.access(cpu, s.peek(pick), 8, false)
			}
		}
		s.taskPath = vary(s.taskPath[:0], p, rng)
		p = s.taskPath
		inner := act
		if irq || sdei {
			inner = func() error {
				if irq {
					if err := s.irq(cpu, rng, sdei && rng.IntN(2) == 0); err != nil {
						return err
					}
				} else if err := s.sdei(cpu, rng.IntN(4) == 0); err != nil {
					return err
				}
				return act()
			}
		}
		if err := s.along(cpu, p, inner); err != nil {
			return err
		}
	}
	return nil
}

// vary appends to dst the path p with each intermediate call left out
// with a chance of one in four (inlined, or another route to the same
// place), so the workload records a few hundred distinct traces rather
// than one per path.
func vary(dst, p path, rng *rand.Rand) path {
	for i, fn := range p {
		if i == 0 || i == len(p)-1 || rng.IntN(4) != 0 {
			dst = append(dst, fn)
		}
	}
	return dst
}

// take removes and returns a live object chosen by pick.
func (s *Sim) take(pick uint64) uint64 {
	i := int(pick % uint64(len(s.live)))
	a := s.live[i]
	s.live[i] = s.live[len(s.live)-1]
	s.live = s.live[:len(s.live)-1]
	return a
}

func (s *Sim) peek(pick uint64) uint64 { return s.live[int(pick%uint64(len(s.live)))] }

// irq takes a hard IRQ on cpu that allocates or frees, optionally with an
// SDEI event arriving inside it.
func (s *Sim) irq(cpu int, rng *rand.Rand, sdei bool) error {
	c := s.m.CPU(cpu)
	if err := c.EnterIRQ(); err != nil {
		return err
	}
	s.stats.IRQs++
	var err error
	if len(s.live) > 0 && rng.IntN(2) == 0 {
		pick := rng.Uint64()
		s.irqPath = vary(s.irqPath[:0], irqFree, rng)
		err = s.along(cpu, s.irqPath, func() error {
			if sdei {
				if err := s.sdei(cpu, false); err != nil {
					return err
				}
			}
			return s.kfree(cpu, s.take(pick))
		})
	} else {
		s.irqPath = vary(s.irqPath[:0], irqAlloc, rng)
		err = s.along(cpu, s.irqPath, func() error {
			if sdei {
				if err := s.sdei(cpu, false); err != nil {
					return err
				}
			}
			a, err := s.kmalloc(cpu, 96)
			s.live = append(s.live, a)
			return err
		})
	}
	return errors.Join(err, c.ExitIRQ())
}

// sdei delivers an SDEI normal event whose handler reads a live object
// (GHES reading an error status block); with critical, a critical event
// arrives inside it and reads too. SDEI handlers never allocate (NMI-like).
func (s *Sim) sdei(cpu int, critical bool) error {
	c := s.m.CPU(cpu)
	if err := c.EnterSDEI(false); err != nil {
		return err
	}
	s.stats.SDEIs++
	err := s.along(cpu, sdeiRead, func() error {
		if critical {
			if err := c.EnterSDEI(true); err != nil {
				return err
			}
			s.stats.SDEIs++
			err := s.along(cpu, sdeiRead, func() error { return s.readAny(cpu) })
			if err2 := c.ExitSDEI(); err == nil {
				err = err2
			}
			if err != nil {
				return err
			}
		}
		return s.readAny(cpu)
	})
	return errors.Join(err, c.ExitSDEI())
}

func (s *Sim) readAny(cpu int) error {
	if len(s.live) == 0 {
		return nil
	}
	return s.access(cpu, s.live[len(s.live)-1], 8, false)
}
