package unwind_test

import (
	"fmt"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

// Save is the copy path: no callback per frame, exact skip.
func ExampleSave() {
	cfg := machine.DefaultConfig()
	cfg.Funcs = []machine.Func{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	m, _ := machine.NewMachine(cfg)
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
