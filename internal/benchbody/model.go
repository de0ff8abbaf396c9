package benchbody

import (
	"fmt"
	"testing"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

// ModelDepths are the depths at which the modelled stack is unwound.
var ModelDepths = []int{8, 32, 128}

// RecursionMachine builds a one-CPU machine (PAC on or off, a 16 KiB
// shadow stack) whose task is depth calls deep: ret_from_fork and depth-1
// recurse frames below the current one, so an unwinder inlined in the
// innermost function reports depth frames.
func RecursionMachine(pac bool, depth int) (*machine.CPU, error) {
	cfg := machine.DefaultConfig()
	cfg.PAC = pac
	cfg.SCSSize = 16384
	cfg.Funcs = []machine.Func{{Name: "recurse", Calls: []string{"recurse"}}}
	m, err := machine.New(cfg)
	if err != nil {
		return nil, err
	}
	t, err := m.NewTask("bench", "recurse")
	if err != nil {
		return nil, err
	}
	c := m.CPU(0)
	if err := c.Switch(t); err != nil {
		return nil, err
	}
	for c.Depth() < depth+1 {
		if err := c.Call("recurse"); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ModelSource returns the Source of method for RecursionMachine(pac,
// depth), checked to unwind exactly depth frames.
func ModelSource(method unwind.Method, pac bool, depth int) (*unwind.Source, error) {
	c, err := RecursionMachine(pac, depth)
	if err != nil {
		return nil, err
	}
	src, err := c.Source(method, machine.SaveOptions{})
	if err != nil {
		return nil, err
	}
	store := make([]uint64, depth+8)
	n, err := unwind.Save(src, store, 0)
	if err != nil {
		return nil, fmt.Errorf("%v at depth %d: %w", method, depth, err)
	}
	if n != depth {
		return nil, fmt.Errorf("%v at depth %d: %d frames", method, depth, n)
	}
	return src, nil
}

// ModelSave unwinds src with unwind.Save (the SCS copy or the FP walk of
// the modelled stack, through the front door) into a reused store; it
// reports ns/frame for depth frames.
func ModelSave(b *testing.B, src *unwind.Source, depth int) {
	store := make([]uint64, depth+8)
	b.ReportAllocs()
	for b.Loop() {
		unwind.Save(src, store, 0)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(depth), "ns/frame")
}

// EntryContexts are the contexts whose entry and exit EntryExit times.
var EntryContexts = []machine.Context{machine.CtxIRQ, machine.CtxSDEINormal, machine.CtxSDEICritical}

// EntryExit returns a body that enters and leaves ctx (a hard IRQ, an SDEI
// normal or critical event) on a fresh one-CPU machine with x18 policy
// pol: the entry and exit code each policy runs, on the model.
func EntryExit(pol machine.Policy, ctx machine.Context) (func(*testing.B), error) {
	cfg := machine.DefaultConfig()
	cfg.Policy = pol
	cfg.Funcs = []machine.Func{{Name: "work"}}
	m, err := machine.New(cfg)
	if err != nil {
		return nil, err
	}
	t, err := m.NewTask("bench", "work")
	if err != nil {
		return nil, err
	}
	c := m.CPU(0)
	if err := c.Switch(t); err != nil {
		return nil, err
	}
	var enter, exit func() error
	switch ctx {
	case machine.CtxIRQ:
		enter, exit = c.EnterIRQ, c.ExitIRQ
	case machine.CtxSDEINormal:
		enter, exit = func() error { return c.EnterSDEI(false) }, c.ExitSDEI
	case machine.CtxSDEICritical:
		if err := c.EnterSDEI(false); err != nil {
			return nil, err
		}
		enter, exit = func() error { return c.EnterSDEI(true) }, c.ExitSDEI
	default:
		return nil, fmt.Errorf("benchbody: no entry for context %v", ctx)
	}
	return func(b *testing.B) {
		for b.Loop() {
			if err := enter(); err != nil {
				b.Fatal(err)
			}
			if err := exit(); err != nil {
				b.Fatal(err)
			}
		}
	}, nil
}

// SaveToDepotWays are the ways ModelSaveToDepot stores an unwound trace in
// a depot: "unwind" is the unwind alone (unwind.Save, the floor),
// "twopass" unwind.Save then depot.Save (the depot hashes the trace
// again), "onepass" unwind.SaveToDepot (one call: the unwind, at most the
// depot's MaxFrames, and one sweep of the stored frames that hashes them).
var SaveToDepotWays = []string{"unwind", "twopass", "onepass"}

// ModelSaveToDepot unwinds src (depth frames) and stores the trace in a
// depot that already holds it, the way way says (SaveToDepotWays): the
// KASAN path on a hit, the common case of kasan_save_stack.
func ModelSaveToDepot(b *testing.B, src *unwind.Source, depth int, way string) {
	d, err := depot.New(depot.Config{})
	if err != nil {
		b.Fatal(err)
	}
	store := make([]uint64, depth+8)
	want, err := unwind.SaveToDepot(d, src, store, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	switch way {
	case "unwind":
		for b.Loop() {
			unwind.Save(src, store, 0)
		}
	case "twopass":
		for b.Loop() {
			n, _ := unwind.Save(src, store, 0)
			if h, _ := d.Save(store[:n]); h != want {
				b.Fatal("another handle")
			}
		}
	case "onepass":
		for b.Loop() {
			if h, _ := unwind.SaveToDepot(d, src, store, 0); h != want {
				b.Fatal("another handle")
			}
		}
	default:
		b.Fatalf("unknown way %q", way)
	}
}
