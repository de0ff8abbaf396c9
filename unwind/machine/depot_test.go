package machine

import (
	"errors"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/unwind"
)

// TestCPUSaveToDepot checks CPU.SaveToDepot against the model's
// expectation in every configuration variant, for both methods, and that
// storing a known trace that unwinds without error allocates nothing.
func TestCPUSaveToDepot(t *testing.T) {
	d, err := depot.New(depot.Config{MaxFrames: depot.MaxFramesLimit})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]uint64, 128)
	for _, cfg := range variants() {
		m, c := newTestMachine(t, func(c *Config) { *c = cfg })
		must(t, c.Call("do_work"))
		must(t, c.EnterIRQ())
		must(t, c.Call("irq_driver"))
		for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
			if method == unwind.MethodSCS && !cfg.SCS {
				continue
			}
			opts := SaveOptions{Skip: 1}
			x := c.Expect(method, opts)
			h, err := c.SaveToDepot(d, method, buf, opts)
			if !errors.Is(err, x.Err) || (err == nil) != (x.Err == nil) {
				t.Fatalf("%v: err %v, want %v", method, err, x.Err)
			}
			if len(x.PCs) == 0 {
				if h != 0 {
					t.Fatalf("%v: handle %v for an empty trace", method, h)
				}
				continue
			}
			got, err := d.Fetch(h, nil)
			if err != nil || !slices.Equal(got, x.PCs) {
				t.Fatalf("%v: stored %s (%v), want %s", method, m.names(got), err, m.names(x.PCs))
			}
			if x.Err != nil {
				continue // scs formats the error of a walk that stops part-way
			}
			if a := testing.AllocsPerRun(20, func() {
				if h2, _ := c.SaveToDepot(d, method, buf, opts); h2 != h {
					panic("another handle for the same trace")
				}
			}); a != 0 {
				t.Errorf("%v %v: SaveToDepot of a known trace: %v allocations, want 0", method, cfg.Policy, a)
			}
		}
	}
}
