package unwind

import (
	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/scs"
)

// scsDriver is the machine's side of the shadow call stack: package scs's
// model, driven by the machine's entry code.
type scsDriver interface {
	newTask(name string) (any, error)
	switchTo(cpu int, t any) error
	push(cpu int, lr uint64) error
	pop(cpu int) (uint64, error)
	enterIRQ(cpu int, slot, pc uint64) error
	exitIRQ(cpu int) error
	enterSDEI(cpu int, critical bool, slot, pc uint64) error
	exitSDEI(cpu int) error
	view(cpu int) (scs.View, error)
	model() *scs.Model
}

type scsModel struct{ m *scs.Model }

func newSCSDriver(m *Machine) (scsDriver, error) {
	cfg := scs.Config{
		Size:              m.cfg.SCSSize,
		Policy:            m.cfg.Policy,
		NumCPU:            m.cfg.NumCPU,
		Layout:            m.cfg.Layout,
		KeepInterruptedPC: m.cfg.KeepInterruptedPC,
		Mem:               m.mem,
	}
	sm, err := scs.New(cfg, func(name, kind string, size uint64) (*mem.Region, error) {
		return m.alloc(name, kind, size, size)
	})
	if err != nil {
		return nil, err
	}
	return scsModel{sm}, nil
}

func (d scsModel) newTask(name string) (any, error) { return d.m.NewTask(name) }
func (d scsModel) switchTo(cpu int, t any) error    { return d.m.Switch(cpu, t.(*scs.Task)) }
func (d scsModel) push(cpu int, lr uint64) error    { return d.m.Push(cpu, lr) }
func (d scsModel) pop(cpu int) (uint64, error)      { return d.m.Pop(cpu) }
func (d scsModel) enterIRQ(cpu int, slot, pc uint64) error {
	return d.m.EnterIRQ(cpu, slot, pc)
}
func (d scsModel) exitIRQ(cpu int) error { return d.m.ExitIRQ(cpu) }
func (d scsModel) enterSDEI(cpu int, critical bool, slot, pc uint64) error {
	return d.m.EnterSDEI(cpu, critical, slot, pc)
}
func (d scsModel) exitSDEI(cpu int) error         { return d.m.ExitSDEI(cpu) }
func (d scsModel) view(cpu int) (scs.View, error) { return d.m.View(cpu) }
func (d scsModel) model() *scs.Model              { return d.m }
