package unwind_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

// TestSaveToDepot checks the KASAN path on the front door: the stored
// trace is what Save returns, a known trace allocates nothing, a partial
// walk stores what it had with its error, and an empty one stores nothing.
func TestSaveToDepot(t *testing.T) {
	d, err := depot.New(depot.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := recursing(t, 4096, 5)
	src, err := c.Source(unwind.MethodFP, machine.SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]uint64, 64)
	h, err := unwind.SaveToDepot(d, src, buf, 1)
	if err != nil || h == 0 {
		t.Fatalf("SaveToDepot = %v, %v", h, err)
	}
	want := make([]uint64, 64)
	n, _ := unwind.Save(src, want, 1)
	got, err := d.Fetch(h, nil)
	if err != nil || !slices.Equal(got, want[:n]) || n == 0 {
		t.Fatalf("stored %#x (%v), Save gives %#x", got, err, want[:n])
	}
	if a := testing.AllocsPerRun(100, func() {
		if h2, err := unwind.SaveToDepot(d, src, buf, 1); h2 != h || err != nil {
			panic("another handle for the same trace")
		}
	}); a != 0 {
		t.Errorf("SaveToDepot of a known trace: %v allocations, want 0", a)
	}
	// Skip past every frame: nothing to store.
	if h, err := unwind.SaveToDepot(d, src, buf, 1000); h != 0 || err != nil {
		t.Errorf("empty trace: %v, %v; want the zero handle and no error", h, err)
	}

	// OnStack: the SCS copy stops at the IRQ boundary with
	// ErrInterruptedTopHidden after the IRQ context's frames.
	cfg := machine.DefaultConfig()
	cfg.Policy = machine.OnStack
	cfg.Funcs = []machine.Func{{Name: "worker"}, {Name: "tick"}}
	m, err := machine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	task, _ := m.NewTask("t", "worker")
	ci := m.CPU(0)
	if err := ci.Switch(task); err != nil {
		t.Fatal(err)
	}
	if err := ci.EnterIRQ(); err != nil {
		t.Fatal(err)
	}
	if err := ci.Call("tick"); err != nil {
		t.Fatal(err)
	}
	src, err = ci.Source(unwind.MethodSCS, machine.SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err = unwind.SaveToDepot(d, src, buf, 0)
	if !errors.Is(err, unwind.ErrInterruptedTopHidden) || h == 0 {
		t.Fatalf("partial walk: %v, %v; want a handle and ErrInterruptedTopHidden", h, err)
	}
	n, _ = unwind.Save(src, want, 0)
	if got, _ := d.Fetch(h, nil); !slices.Equal(got, want[:n]) {
		t.Errorf("partial walk stored %#x, want %#x", got, want[:n])
	}
}

// TestStoreTraceDepotFull checks that a depot refusing the trace gives the
// zero handle and an error wrapping the depot's.
func TestStoreTraceDepotFull(t *testing.T) {
	d, err := depot.New(depot.Config{MaxPools: 1})
	if err != nil {
		t.Fatal(err)
	}
	trace := []uint64{1, 2, 3, 4}
	for i := uint64(0); ; i++ {
		if i == 1<<22 {
			t.Fatal("a one-pool depot never filled up")
		}
		trace[0] = 0x1000 + i
		if _, err := d.Save(trace); errors.Is(err, depot.ErrNoSpace) {
			break
		}
	}
	trace[0] = 0x42
	h, err := unwind.StoreTrace(d, trace, nil)
	if h != 0 || !errors.Is(err, depot.ErrNoSpace) {
		t.Errorf("full depot: %v, %v; want the zero handle and ErrNoSpace", h, err)
	}
}

// TestSaveToDepotFiltered checks the KASAN path with a depot that cuts
// traces (filter_irq_stacks): the handle is the one the depot's own cut of
// the whole trace gets, what it holds is the trace through the filtered
// frame, and a hit calls the filter once per frame kept, in the sweep that
// hashes (no second pass over the trace).
func TestSaveToDepotFiltered(t *testing.T) {
	// A chain of distinct functions: worker -> f1 -> f2 -> f3 -> f4.
	cfg := machine.DefaultConfig()
	cfg.Funcs = []machine.Func{{Name: "worker", Calls: []string{"f1"}}, {Name: "f1", Calls: []string{"f2"}},
		{Name: "f2", Calls: []string{"f3"}}, {Name: "f3", Calls: []string{"f4"}}, {Name: "f4"}}
	m, err := machine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	task, _ := m.NewTask("t", "worker")
	c := m.CPU(0)
	if err := c.Switch(task); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"f1", "f2", "f3", "f4"} {
		if err := c.Call(f); err != nil {
			t.Fatal(err)
		}
	}
	src, err := c.Source(unwind.MethodFP, machine.SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full := make([]uint64, 64)
	n, _ := unwind.Save(src, full, 0)
	if n < 5 {
		t.Fatalf("%d frames: %#x", n, full[:n])
	}
	at := 2 // the frame the filter cuts after
	entry := depot.EntryText([]uint64{full[at]}, []uint64{full[at] + 1})
	calls := 0
	d, err := depot.New(depot.Config{Filter: func(pc uint64) bool { calls++; return entry(pc) }})
	if err != nil {
		t.Fatal(err)
	}
	want, err := d.Save(full[:n])
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]uint64, 64)
	calls = 0
	h, err := unwind.SaveToDepot(d, src, buf, 0)
	if err != nil || h != want {
		t.Fatalf("SaveToDepot = %v, %v; the depot's own cut is %v", h, err, want)
	}
	if calls != at+1 {
		t.Errorf("a hit called the filter %d times, want %d (the frames through the cut, once)", calls, at+1)
	}
	if got, _ := d.Fetch(h, nil); !slices.Equal(got, full[:at+1]) {
		t.Errorf("stored %#x, want %#x", got, full[:at+1])
	}
	// StoreHashed refuses a trace the filter would cut shorter.
	d2, _ := depot.New(depot.Config{Filter: entry})
	k := d2.HashKey()
	hh := k.Start()
	for _, pc := range full[:n] {
		hh = k.Add(hh, pc)
	}
	if _, err := unwind.StoreHashed(d2, full[:n], hh, nil); !errors.Is(err, depot.ErrNotFiltered) {
		t.Errorf("StoreHashed of an uncut trace: %v, want ErrNotFiltered", err)
	}
}

// TestSaveToDepotMaxFrames: with a stack deeper than the depot keeps, the
// unwinder makes only the frames the depot keeps (buf past them is not
// written), and the handle is the one the depot's own truncation of the
// whole trace gets.
func TestSaveToDepotMaxFrames(t *testing.T) {
	c := recursing(t, 4096, 20)
	src, err := c.Source(unwind.MethodFP, machine.SaveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full := make([]uint64, 64)
	n, _ := unwind.Save(src, full, 0)
	const keep = 8
	if n <= keep {
		t.Fatalf("%d frames", n)
	}
	d, err := depot.New(depot.Config{MaxFrames: keep})
	if err != nil {
		t.Fatal(err)
	}
	if d.MaxFrames() != keep {
		t.Fatalf("MaxFrames() = %d", d.MaxFrames())
	}
	want, err := d.Save(full[:n])
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]uint64, 64)
	for i := range buf {
		buf[i] = 0xdead
	}
	h, err := unwind.SaveToDepot(d, src, buf, 0)
	if err != nil || h != want {
		t.Fatalf("SaveToDepot = %v, %v; the depot's truncation is %v", h, err, want)
	}
	if !slices.Equal(buf[:keep], full[:keep]) || buf[keep] != 0xdead {
		t.Errorf("buf %#x: want the first %d frames, then nothing written", buf[:keep+1], keep)
	}
}
