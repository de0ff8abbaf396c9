package slab

import "fmt"

// Demo runs a short scripted workload on two CPUs with three planted bugs
// and returns the reports KASAN prints for them, in order:
//
//  1. use-after-free in task context: netd allocates an skb (task
//     context); an IRQ on cpu1, interrupting writer, frees it; netd reads
//     it.
//  2. use-after-free in SDEI context: an IRQ allocates a timer event;
//     kworker/0:1 frees it; an SDEI event interrupting writer reads it, so
//     the call trace crosses from the SDEI stack into writer's.
//  3. double free: writer frees a seq buffer twice.
//
// Demo needs a Sim on which nothing has run yet.
func (s *Sim) Demo() ([]Report, error) {
	if len(s.running) < 2 {
		return nil, fmt.Errorf("slab: Demo needs 2 CPUs, have %d", len(s.running))
	}
	const netd, writer, kworker = 0, 1, 2
	var a, b, c uint64
	steps := []struct {
		what string
		do   func() error
	}{
		{"cpu0 runs netd", func() error { return s.run(0, netd) }},
		{"cpu1 runs writer", func() error { return s.run(1, writer) }},
		{"netd allocates an skb", func() (err error) {
			return s.along(0, netdAlloc, func() error { a, err = s.kmalloc(0, 200); return err })
		}},
		{"an IRQ on cpu1 frees the skb", func() error {
			return s.along(1, writerRead, func() error {
				return s.inIRQ(1, irqFree, func() error { return s.kfree(1, a) })
			})
		}},
		{"netd reads the freed skb", func() error {
			return s.along(0, netdRead, func() error { return s.access(0, a+16, 8, false) })
		}},
		{"an IRQ on cpu1 allocates a timer event", func() error {
			return s.along(1, writerRead, func() error {
				return s.inIRQ(1, irqAlloc, func() (err error) { b, err = s.kmalloc(1, 96); return err })
			})
		}},
		{"cpu0 runs kworker/0:1", func() error { return s.run(0, kworker) }},
		{"kworker/0:1 frees the timer event", func() error {
			return s.along(0, kworkerFree, func() error { return s.kfree(0, b) })
		}},
		{"an SDEI event on cpu1 reads the freed event", func() error {
			return s.along(1, writerRead, func() error {
				c := s.m.CPU(1)
				if err := c.EnterSDEI(false); err != nil {
					return err
				}
				s.stats.SDEIs++
				err := s.along(1, sdeiRead, func() error { return s.access(1, b+8, 8, false) })
				if err2 := c.ExitSDEI(); err == nil {
					err = err2
				}
				return err
			})
		}},
		{"writer allocates a seq buffer", func() (err error) {
			return s.along(1, writerAlloc, func() error { c, err = s.kmalloc(1, 48); return err })
		}},
		{"writer frees it", func() error {
			return s.along(1, writerFree, func() error { return s.kfree(1, c) })
		}},
		{"writer frees it again", func() error {
			return s.along(1, writerFree, func() error { return s.kfree(1, c) })
		}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			return s.reports, fmt.Errorf("slab: demo: %s: %w", st.what, err)
		}
	}
	return s.reports, nil
}

// inIRQ takes a hard IRQ on cpu, runs at at the end of p below
// handle_arch_irq, and returns from the IRQ.
func (s *Sim) inIRQ(cpu int, p path, at func() error) error {
	c := s.m.CPU(cpu)
	if err := c.EnterIRQ(); err != nil {
		return err
	}
	s.stats.IRQs++
	err := s.along(cpu, p, at)
	if err2 := c.ExitIRQ(); err == nil {
		err = err2
	}
	return err
}
