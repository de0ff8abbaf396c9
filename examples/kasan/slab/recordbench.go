package slab

import (
	"errors"

	"github.com/unwindkit/unwindkit/unwind"
)

// RecordBench holds loops that each do one part of a stack recording n
// times at a fixed point of the model (see Sim.RecordBench).
type RecordBench struct {
	// Frames is the number of frames a recording keeps.
	Frames int
	// Source builds the unwinder's view of the CPU (the model's stand-in
	// for reading registers); Unwind unwinds one such view into the
	// buffer; Depot saves the (filtered) trace, a hit; All is the whole
	// kasan_save_stack: Source, Unwind and Depot.
	Source, Unwind, Depot, All func(n int) error
}

// RecordBench drives cpu 0 to kmalloc on netd's allocation path (on the
// Config.DeepPath path if there is one; inside a hard IRQ's allocation path
// if inIRQ) and returns loops that record the
// stack there as kasan_save_stack does, whole and part by part. The Sim
// must be fresh and record stacks; it is left inside kmalloc.
func (s *Sim) RecordBench(inIRQ bool) (*RecordBench, error) {
	if s.cfg.Record == RecordNone {
		return nil, errors.New("slab: RecordBench without a recording method")
	}
	if err := s.run(0, 0); err != nil {
		return nil, err
	}
	c := s.m.CPU(0)
	p := netdAlloc
	if s.deepPath != nil {
		p = s.deepPath
	}
	if inIRQ {
		for _, fn := range netdRead {
			if err := c.Call(fn); err != nil {
				return nil, err
			}
		}
		if err := c.EnterIRQ(); err != nil {
			return nil, err
		}
		p = irqAlloc
	}
	for _, fn := range p {
		if err := c.Call(fn); err != nil {
			return nil, err
		}
	}
	h, err := s.record(0)
	if err != nil {
		return nil, err
	}
	rb := &RecordBench{}
	if rb.Frames, err = s.slab.Depot.Len(h); err != nil {
		return nil, err
	}
	src, err := c.Source(s.method, s.opts)
	if err != nil {
		return nil, err
	}
	raw, _ := unwind.Save(src, s.buf[:], 0)
	trace := append([]uint64(nil), s.buf[:raw]...)
	rb.Source = func(n int) error {
		for range n {
			if err := c.SourceInto(&s.src, s.method, s.opts); err != nil {
				return err
			}
		}
		return nil
	}
	rb.Unwind = func(n int) error {
		for range n {
			unwind.Save(src, s.buf[:], 0)
		}
		return nil
	}
	rb.Depot = func(n int) error {
		for range n {
			if _, err := s.slab.Depot.Save(trace); err != nil {
				return err
			}
		}
		return nil
	}
	rb.All = func(n int) error {
		for range n {
			if _, err := s.record(0); err != nil {
				return err
			}
		}
		return nil
	}
	return rb, nil
}
