// Command nested is unwindkit's main demo. On one modelled arm64 CPU a task
// calls a few functions, takes a hard IRQ, then an SDEI normal event, then
// an SDEI critical one. It prints, side by side and symbolized, the CPU's
// ground truth, the shadow call stack copy and the frame-pointer walk with
// each frame's origin, and explains every difference by the rule behind
// it; then the per-policy cost of the entry code and a quick timing of
// both unwinders.
//
//	go run ./examples/nested [-policy thread_info|on-stack|per-cpu] [-pac] [-keep-pc] [-fgraph]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

func main() {
	policy := machine.ThreadInfo
	flag.TextVar(&policy, "policy", machine.ThreadInfo, "where entry code keeps the interrupted x18: thread_info, on-stack or per-cpu")
	pac := flag.Bool("pac", true, "sign return addresses (pac-ret, QARMA5)")
	keep := flag.Bool("keep-pc", false, "keep the interrupted pc per-CPU (the seed's fix)")
	fgraph := flag.Bool("fgraph", false, "enable the function-graph tracer")
	timing := flag.Bool("timing", true, "time both unwinders")
	flag.Parse()
	if err := run(os.Stdout, policy, *pac, *keep, *fgraph, *timing); err != nil {
		fmt.Fprintln(os.Stderr, "nested:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, pol machine.Policy, pac, keep, fgraph, timing bool) error {
	cfg := machine.DefaultConfig()
	cfg.Policy, cfg.PAC, cfg.KeepInterruptedPC, cfg.FGraph = pol, pac, keep, fgraph
	cfg.Funcs = []machine.Func{
		{Name: "worker_thread"},
		{Name: "process_one_work", Locals: 32},
		{Name: "memcpy_fast", NoFrame: true}, // -fomit-frame-pointer
		{Name: "crc32_leaf", Leaf: true},
		{Name: "gic_handle_irq"},
		{Name: "timer_interrupt"},
		{Name: "kmalloc"},
		{Name: "sdei_event_handler"},
		{Name: "ghes_notify_sdei"},
		{Name: "asm_helper", NoSCS: true}, // __noscs
	}
	m, err := machine.New(cfg)
	if err != nil {
		return err
	}
	task, err := m.NewTask("kworker/0:1", "worker_thread")
	if err != nil {
		return err
	}
	c := m.CPU(0)
	steps := []struct {
		what string
		do   func() error
	}{
		{"switch to kworker/0:1", func() error { return c.Switch(task) }},
		{"call process_one_work", func() error { return c.Call("process_one_work") }},
		{"call memcpy_fast", func() error { return c.Call("memcpy_fast") }},
		{"call crc32_leaf", func() error { return c.Call("crc32_leaf") }},
		{"take a hard IRQ", c.EnterIRQ},
		{"call gic_handle_irq", func() error { return c.Call("gic_handle_irq") }},
		{"call timer_interrupt", func() error { return c.Call("timer_interrupt") }},
		{"take an SDEI normal event", func() error { return c.EnterSDEI(false) }},
		{"call sdei_event_handler", func() error { return c.Call("sdei_event_handler") }},
		{"call asm_helper", func() error { return c.Call("asm_helper") }},
		{"take an SDEI critical event", func() error { return c.EnterSDEI(true) }},
		{"call ghes_notify_sdei", func() error { return c.Call("ghes_notify_sdei") }},
		{"call kmalloc", func() error { return c.Call("kmalloc") }},
	}
	fmt.Fprintln(w, "unwindkit nested-contexts demo: one modelled arm64 CPU")
	fmt.Fprintf(w, "config: shadow call stack %d B, policy %v, frame pointers, PAC %v, keep interrupted pc %v, fgraph %v\n\n",
		cfg.SCSSize, pol, pac, keep, fgraph)
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Fprintf(w, "  %-28s -> %s context, %d live functions in it\n", s.what, c.Context(), c.Depth())
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Inside kmalloc (SDEI critical), unwinding inline with both techniques:")
	cmp, err := c.Compare(machine.SaveOptions{})
	if err != nil {
		return err
	}
	if err := cmp.Format(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Extra memory operations the entry code adds, per policy (the maintainer's objection, as numbers):")
	costTable(w, keep)
	if st, ok := m.SCSStats(); ok {
		fmt.Fprintf(w, "this run's entries and exits: %+v\n", st)
	}
	if timing {
		fmt.Fprintln(w)
		return timeBoth(w, cfg)
	}
	return nil
}

// timeBoth times both unwinders on the same modelled stack of each depth.
func timeBoth(w io.Writer, base machine.Config) error {
	fmt.Fprintf(w, "Quick timing on %s/%s, %d CPUs (absolute times vary by machine; the ratio is the result):\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	for _, depth := range []int{8, 32, 128} {
		cfg := base
		cfg.Funcs = []machine.Func{{Name: "recurse", Calls: []string{"recurse"}}}
		cfg.SCSSize = 16384
		m, err := machine.New(cfg)
		if err != nil {
			return err
		}
		t, err := m.NewTask("bench", "recurse")
		if err != nil {
			return err
		}
		c := m.CPU(0)
		if err := c.Switch(t); err != nil {
			return err
		}
		for c.Depth() < depth+1 {
			if err := c.Call("recurse"); err != nil {
				return err
			}
		}
		var ns [2]float64
		for i, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
			src, err := c.Source(method, machine.SaveOptions{})
			if err != nil {
				return err
			}
			store := make([]uint64, 256)
			n, _ := unwind.Save(src, store, 0)
			// Warm up, then keep the best of several rounds: one quick
			// look, not a benchmark (examples/compare is the report).
			const iters, rounds = 20000, 7
			best := time.Duration(1<<63 - 1)
			for r := 0; r < rounds; r++ {
				start := time.Now()
				for j := 0; j < iters; j++ {
					unwind.Save(src, store, 0)
				}
				best = min(best, time.Since(start))
			}
			ns[i] = float64(best.Nanoseconds()) / iters / float64(n)
		}
		fmt.Fprintf(w, "  depth %3d: SCS copy %6.2f ns/frame, FP walk %6.2f ns/frame, FP/SCS %.1fx\n", depth, ns[0], ns[1], ns[1]/ns[0])
	}
	return nil
}

// costTable prints scs.EntryCost and scs.ExitCost for every policy and
// context as a text table.
func costTable(w io.Writer, keep bool) {
	fmt.Fprintf(w, "%-12s %-14s %-28s %-28s\n", "policy", "context", "entry", "exit")
	for _, p := range scs.Policies {
		for c := scs.CtxIRQ; c < scs.NumContexts; c++ {
			fmt.Fprintf(w, "%-12s %-14s %-28s %-28s\n", p, c,
				scs.EntryCost(p, c, keep), scs.ExitCost(p, c, keep))
		}
	}
}
