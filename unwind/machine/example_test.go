package machine_test

import (
	"fmt"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

// A task calls two functions and takes an IRQ; both unwinders run inline in
// the IRQ handler's callee.
func ExampleNew() {
	cfg := machine.DefaultConfig()
	cfg.Funcs = []machine.Func{{Name: "worker"}, {Name: "step"}, {Name: "tick"}}
	m, err := machine.New(cfg)
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
		n, err := c.Unwind(method, machine.Inline, store, machine.SaveOptions{})
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

// Compare explains each difference between the two techniques.
func ExampleCPU_Compare() {
	cfg := machine.DefaultConfig()
	cfg.Funcs = []machine.Func{{Name: "main_loop"}, {Name: "fast", NoFrame: true}, {Name: "leaf", Leaf: true}, {Name: "handler"}}
	m, _ := machine.New(cfg)
	t, _ := m.NewTask("t", "main_loop")
	c := m.CPU(0)
	c.Switch(t)
	c.Call("fast")
	c.Call("leaf")
	c.EnterSDEI(false)
	c.Call("handler")
	cmp, _ := c.Compare(machine.SaveOptions{})
	for _, r := range cmp.Rows {
		if r.InSCS != r.InFP {
			fmt.Printf("%s: scs=%v fp=%v\n", m.Symbolizer().Func(r.Truth.PC), r.InSCS, r.InFP)
		}
	}
	// Output:
	// leaf: scs=false fp=true
	// main_loop: scs=true fp=false
}

// The model's ground truth: every live function across contexts, where
// its return address is kept, and what each technique must return.
func Example() {
	cfg := machine.DefaultConfig()
	cfg.Funcs = []machine.Func{{Name: "worker"}, {Name: "leaf", Leaf: true}}
	m, _ := machine.New(cfg)
	t, _ := m.NewTask("kworker", "worker")
	c := m.CPU(0)
	c.Switch(t)
	c.Call("leaf")
	c.EnterIRQ()
	for _, f := range c.Truth() {
		fmt.Printf("%-20s %-5s saved by %s\n", m.Symbolizer().Func(f.PC), f.Context, f.SavedBy)
	}
	x := c.Expect(unwind.MethodSCS, machine.SaveOptions{})
	fmt.Println("the SCS copy misses", len(x.Missing), "of them")
	// Output:
	// handle_arch_irq      irq   saved by register
	// call_on_irq_stack    task  saved by handle_arch_irq
	// el1h_64_irq_handler  task  saved by call_on_irq_stack
	// el1h_64_irq          task  saved by el1h_64_irq_handler
	// leaf                 task  saved by pt_regs
	// worker               task  saved by x30
	// ret_from_fork        task  saved by worker
	// the SCS copy misses 3 of them
}
