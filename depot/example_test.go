package depot_test

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/unwindkit/unwindkit/depot"
)

func Example() {
	d, err := depot.New(depot.Config{CountHits: true})
	if err != nil {
		panic(err)
	}
	trace := []uint64{0xffff800080123450, 0xffff800080234560, 0xffff800080345670}
	h1, _ := d.Save(trace)
	h2, _ := d.Save(trace) // same trace, same handle
	fmt.Println(h1 == h2, h1 != 0)

	frames, _ := d.Fetch(h1, nil)
	fmt.Printf("%#x\n", frames)
	st := d.Stats()
	fmt.Println(st.InUse, st.Hits, st.Misses)
	// Output:
	// true true
	// [0xffff800080123450 0xffff800080234560 0xffff800080345670]
	// 1 1 1
}

// Refcounted records are evicted by their last Put, and their handles go
// stale.
func ExampleDepot_Put() {
	d, _ := depot.New(depot.Config{})
	h, _ := d.SaveFlags([]uint64{0x1000, 0x2000}, depot.FlagGet)
	_ = d.Get(h) // a second reference
	_ = d.Put(h)
	_, err := d.Fetch(h, nil)
	fmt.Println(err == nil)
	_ = d.Put(h) // the last reference: evicted
	_, err = d.Fetch(h, nil)
	fmt.Println(errors.Is(err, depot.ErrBadHandle))
	fmt.Println(d.Stats().Free)
	// Output:
	// true
	// true
	// 1
}

// A filter cuts interrupt traces after the IRQ-entry frame, so that the
// interrupted context does not multiply the stored traces.
func ExampleEntryText() {
	irqStart, irqEnd := uint64(0xffff800080010000), uint64(0xffff800080011000)
	d, _ := depot.New(depot.Config{Filter: depot.EntryText([]uint64{irqStart}, []uint64{irqEnd})})
	a, _ := d.Save([]uint64{0xffff800080500000, irqStart + 0x40, 0xffff800080600000})
	b, _ := d.Save([]uint64{0xffff800080500000, irqStart + 0x40, 0xffff800080700000})
	frames, _ := d.Fetch(a, nil)
	fmt.Println(a == b, len(frames))
	// Output: true 2
}

// Live Go program counters are saved without conversion.
func ExampleDepot_SavePCs() {
	d, _ := depot.New(depot.Config{MaxFrames: 32})
	pcs := make([]uintptr, 32)
	n := runtime.Callers(1, pcs)
	h, _ := d.SavePCs(pcs[:n])
	back, _ := d.FetchPCs(h, make([]uintptr, 0, 32))
	fmt.Println(len(back) == n)
	// Output: true
}
