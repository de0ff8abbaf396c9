package unwind_test

import (
	"fmt"
	"os"

	"github.com/unwindkit/unwindkit/unwind"
)

// A task calls two functions and takes an IRQ; both unwinders run inline in
// the IRQ handler's callee.
func ExampleNewMachine() {
	cfg := unwind.DefaultConfig()
	cfg.Funcs = []unwind.Func{{Name: "worker"}, {Name: "step"}, {Name: "tick"}}
	m, err := unwind.NewMachine(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	t, _ := m.NewTask("kworker", "worker")
	c := m.CPU(0)
	c.Switch(t)
	c.Call("step")
	c.EnterIRQ()
	c.Call("tick")
	store := make([]uint64, 32)
	for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		n, err := c.Unwind(method, unwind.Inline, store, unwind.SaveOptions{})
		fmt.Printf("%v (%v):", method, err)
		for _, pc := range store[:n] {
			fmt.Print(" ", m.Symbolizer().Func(pc))
		}
		fmt.Println()
	}
	// Output:
	// scs (<nil>): handle_arch_irq call_on_irq_stack el1h_64_irq worker ret_from_fork
	// fp (<nil>): handle_arch_irq call_on_irq_stack el1h_64_irq_handler el1h_64_irq step worker ret_from_fork
}

// Save is the copy path: no callback per frame, exact skip.
func ExampleSave() {
	cfg := unwind.DefaultConfig()
	cfg.Funcs = []unwind.Func{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	m, _ := unwind.NewMachine(cfg)
	t, _ := m.NewTask("t", "a")
	c := m.CPU(0)
	c.Switch(t)
	c.Call("b")
	c.Call("c")
	src, _ := c.Source(unwind.MethodAuto, unwind.SaveOptions{})
	store := make([]uint64, 8)
	n, err := unwind.Save(src, store, 1) // skip c's return address into b
	for _, pc := range store[:n] {
		fmt.Print(m.Symbolizer().Func(pc), " ")
	}
	fmt.Println(err)
	// Output: a ret_from_fork <nil>
}

// Unwinding a capture of a real arm64 program built with clang's
// -fsanitize=shadow-call-stack and -mbranch-protection=pac-ret.
func ExampleLoadSnapshot() {
	f, err := os.Open("../testdata/arm64/snapshots/clang-pacret-pauth-chain.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	s, err := unwind.LoadSnapshot(f)
	if err != nil {
		fmt.Println(err)
		return
	}
	src, _ := s.Source(unwind.MethodSCS)
	for fr, err := range src.Frames() {
		if err != nil {
			fmt.Println(err)
			break
		}
		fmt.Printf("%s raw %#x\n", fr.Symbol, fr.Raw)
	}
	// Output:
	// shape_args+0x50 raw 0x25000000201f4c
	// shape_vla+0x78 raw 0x45000000202020
	// shape_callee+0x34 raw 0x39000000202088
	// shape_big+0x34 raw 0x7a0000002020fc
	// chain_root+0x14 raw 0x12000000202140
	// main+0x110 raw 0x66000000201444
}

// Compare explains each difference between the two techniques.
func ExampleCPU_Compare() {
	cfg := unwind.DefaultConfig()
	cfg.Funcs = []unwind.Func{{Name: "main_loop"}, {Name: "fast", NoFrame: true}, {Name: "leaf", Leaf: true}, {Name: "handler"}}
	m, _ := unwind.NewMachine(cfg)
	t, _ := m.NewTask("t", "main_loop")
	c := m.CPU(0)
	c.Switch(t)
	c.Call("fast")
	c.Call("leaf")
	c.EnterSDEI(false)
	c.Call("handler")
	cmp, _ := c.Compare(unwind.SaveOptions{})
	for _, r := range cmp.Rows {
		if r.InSCS != r.InFP {
			fmt.Printf("%s: scs=%v fp=%v\n", m.Symbolizer().Func(r.Truth.PC), r.InSCS, r.InFP)
		}
	}
	// Output:
	// leaf: scs=false fp=true
	// main_loop: scs=true fp=false
}
