package scs

import (
	"errors"
	"testing"

	"github.com/unwindkit/unwindkit/internal/mem"
)

const (
	stackBase = 0xffff800008000000 // the driver's normal stack (for OnStack slots)
	stackSize = 16384
	scsBase   = 0xffff800010000000
)

// rig is a minimal driver: a Memory with one normal stack per CPU and the
// model's shadow stacks, and a stack pointer per CPU for OnStack slots.
type rig struct {
	m   *Model
	mem *mem.Memory
	sp  []uint64
}

func newRig(tb testing.TB, cfg Config) *rig {
	tb.Helper()
	mm := &mem.Memory{}
	n := cfg.NumCPU
	if n == 0 {
		n = 1
	}
	r := &rig{mem: mm}
	for cpu := range n {
		base := uint64(stackBase) + uint64(cpu)*2*stackSize
		st, err := mem.NewRegion("stack", "task", base, stackSize)
		if err != nil {
			tb.Fatal(err)
		}
		if err := mm.Add(st); err != nil {
			tb.Fatal(err)
		}
		r.sp = append(r.sp, st.End())
	}
	cfg.Mem = mm
	m, err := New(cfg, memAlloc(mm, scsBase))
	if err != nil {
		tb.Fatal(err)
	}
	r.m = m
	return r
}

func (r *rig) enterIRQ(cpu int, pc uint64) error {
	if err := r.m.EnterIRQ(cpu, r.sp[cpu]-16, pc); err != nil {
		return err
	}
	r.sp[cpu] -= 16
	return nil
}

func (r *rig) exitIRQ(cpu int) error {
	if err := r.m.ExitIRQ(cpu); err != nil {
		return err
	}
	r.sp[cpu] += 16
	return nil
}

func (r *rig) enter(cpu int, c Context, pc uint64) error {
	switch c {
	case CtxIRQ:
		return r.enterIRQ(cpu, pc)
	case CtxSDEINormal, CtxSDEICritical:
		return r.m.EnterSDEI(cpu, c == CtxSDEICritical, 0, pc)
	}
	return errors.New("enter task")
}

func (r *rig) exit(cpu int, c Context) error {
	if c == CtxIRQ {
		return r.exitIRQ(cpu)
	}
	return r.m.ExitSDEI(cpu)
}

// retAddr is a recognisable kernel return address for entry i of context c.
func retAddr(c Context, i int) uint64 {
	return 0xffff800080000000 | uint64(c)<<20 | uint64(i)*4
}

// interruptedPC is a recognisable interrupted PC for entering context c.
func interruptedPC(c Context) uint64 { return 0xffff800090000000 | uint64(c)<<20 }

func mustPush(tb testing.TB, m *Model, cpu int, v uint64) {
	tb.Helper()
	if err := m.Push(cpu, v); err != nil {
		tb.Fatalf("push %#x: %v", v, err)
	}
}

func saveAll(m *Model, cpu int) ([]uint64, error) {
	buf := make([]uint64, 4096)
	n, err := m.Save(cpu, buf, 0)
	return buf[:n], err
}

// memAlloc returns an AllocFunc that places regions in m one after the
// other from base, each followed by an unmapped guard gap of one 4 KiB page
// (like vmalloc'd shadow stacks).
func memAlloc(m *mem.Memory, base uint64) AllocFunc {
	next := base
	return func(name, kind string, size uint64) (uint64, []uint64, error) {
		r, err := mem.NewRegion(name, kind, next, size)
		if err != nil {
			return 0, nil, err
		}
		if err := m.Add(r); err != nil {
			return 0, nil, err
		}
		next = r.End() + 4096
		return r.Base, r.Words(), nil
	}
}

// regionBytes returns the little-endian bytes of r from addr on, for
// Segment.Data.
func regionBytes(r *mem.Region, addr uint64) []byte {
	return r.Bytes()[addr-r.Base:]
}
