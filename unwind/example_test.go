package unwind_test

import (
	"fmt"
	"strings"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

// Save is the copy path: no callback per frame, exact skip.
func ExampleSave() {
	cfg := machine.DefaultConfig()
	cfg.Funcs = []machine.Func{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	m, _ := machine.New(cfg)
	t, _ := m.NewTask("t", "a")
	c := m.CPU(0)
	c.Switch(t)
	c.Call("b")
	c.Call("c")
	src, _ := c.Source(unwind.MethodAuto, machine.SaveOptions{})
	store := make([]uint64, 8)
	n, err := unwind.Save(src, store, 1) // skip c's return address into b
	for _, pc := range store[:n] {
		fmt.Print(m.Symbolizer().Func(pc), " ")
	}
	fmt.Println(err)
	// Output: a ret_from_fork <nil>
}

// The front door's whole cycle: a Source (here from the modelled CPU;
// NewSCSSource and NewFPSource build one over a caller's own memory),
// Frames with provenance, and CompareTraces lining up both techniques.
func Example() {
	cfg := machine.DefaultConfig()
	cfg.Funcs = []machine.Func{{Name: "worker"}, {Name: "fast", NoFrame: true}, {Name: "tick"}}
	m, _ := machine.New(cfg)
	t, _ := m.NewTask("kworker", "worker")
	c := m.CPU(0)
	c.Switch(t)
	c.Call("fast")
	c.Call("tick")
	var traces [2][]unwind.Frame
	for i, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		src, _ := c.Source(method, machine.SaveOptions{})
		for f, err := range src.Frames() {
			if err != nil {
				fmt.Println(err)
				break
			}
			traces[i] = append(traces[i], f)
		}
	}
	cmp := unwind.CompareTraces(m.Symbolizer(), traces[0], traces[1])
	for _, r := range cmp.Rows {
		fmt.Println(strings.TrimSpace(cell(cmp, r.SCS, r.InSCS) + " | " + cell(cmp, r.FP, r.InFP) + " | " + r.Note))
	}
	// Output:
	// fast [scs] | fast [frame] |
	// worker [scs] | - | only SCS: no frame record holds it (frame pointer omitted, or the FP walk stopped)
	// ret_from_fork [scs] | ret_from_fork [frame] |
}

func cell(cmp *unwind.Comparison, f unwind.Frame, ok bool) string {
	if !ok {
		return "-"
	}
	name := cmp.Name(f.PC)
	return fmt.Sprintf("%s [%s]", name[:strings.IndexByte(name, '+')], f.Origin)
}
