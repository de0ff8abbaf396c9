package machine

import (
	"fmt"
	"testing"

	"github.com/unwindkit/unwindkit/unwind"
)

// TestSkipHonoured checks that SaveOptions.Skip means the same everywhere:
// a Source from CPU.Source(method, {Skip: k}) saves and iterates exactly
// what CPU.Unwind and CPU.Expect give for skip k, and CPU.Compare with skip
// k lines up exactly the frames each technique then returns, explaining
// every row the techniques disagree on.
func TestSkipHonoured(t *testing.T) {
	for vi, cfg := range variants() {
		m, c := newTestMachine(t, func(c *Config) { *c = cfg })
		must(t, c.Call("do_work"))
		must(t, c.Call("alloc_obj"))
		must(t, c.EnterIRQ())
		must(t, c.Call("irq_driver"))
		must(t, c.EnterSDEI(false))
		must(t, c.Call("sdei_cb"))
		store := make([]uint64, 128)
		for k := 0; k <= 12; k++ {
			opts := SaveOptions{Skip: k}
			name := fmt.Sprintf("variant %d (%v keep=%v pac=%v fgraph=%v kretprobes=%v) skip %d",
				vi, cfg.Policy, cfg.KeepInterruptedPC, cfg.PAC, cfg.FGraph, cfg.Kretprobes, k)
			for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
				if method == unwind.MethodSCS && !cfg.SCS || method == unwind.MethodFP && !cfg.FramePointers {
					continue
				}
				want := c.Expect(method, opts).PCs
				n, _ := c.Unwind(method, Inline, store, opts)
				if fmt.Sprint(store[:n]) != fmt.Sprint(want) {
					t.Fatalf("%s: %v: Unwind %s, want %s", name, method, m.names(store[:n]), m.names(want))
				}
				src, err := c.Source(method, opts)
				if err != nil {
					t.Fatal(err)
				}
				n, _ = unwind.Save(src, store, 0)
				if fmt.Sprint(store[:n]) != fmt.Sprint(want) {
					t.Fatalf("%s: %v: Save(Source) %s, want %s", name, method, m.names(store[:n]), m.names(want))
				}
				var got []uint64
				for f, err := range src.Frames() {
					if err == nil {
						got = append(got, f.PC)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: %v: Frames %s, want %s", name, method, m.names(got), m.names(want))
				}
			}
			cmp, err := c.Compare(opts)
			if err != nil {
				t.Fatal(err)
			}
			checkCompareRows(t, name+": ", m, c, opts, cmp)
		}
	}
}
