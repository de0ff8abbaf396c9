// Command kasan puts unwindkit to the use the 2022 arm64 "collect KASAN
// stack traces from the Shadow Call Stack" series argued about: recording
// an allocation stack and a free stack for every object.
//
// First, on the modelled arm64 machine (package unwind), a slab allocator
// with generic KASAN's metadata (examples/kasan/slab): kmalloc and kfree
// record the current stack with the shadow call stack copy or the
// frame-pointer walk (-record) into a stack depot that cuts each trace at
// the first IRQ-entry frame (filter_irq_stacks); objects keep only the
// 32-bit handles. A scripted run with several tasks on two CPUs, IRQs that
// allocate and free, and SDEI events plants a use-after-free in task
// context, one in SDEI context and a double free, and prints KASAN's
// reports with both stacks symbolized. A random workload then runs -ops
// operations and prints what the depot holds.
//
// Second, the same workload on the running Go program: goroutines named
// after the model's tasks allocate through a small tracker that records
// stacks with the live unwinder and the same depot, detects the same two
// bugs, and writes what it recorded as a pprof profile (-profile FILE;
// view it with go tool pprof -top FILE).
//
//	go run ./examples/kasan [-record scs|fp|none] [-policy thread_info|on-stack|per-cpu] [-pac] [-ops N] [-profile FILE]
//
// With -boot CALLS,DEPTH, or -boot "D:N D:N ..." (N recordings of D
// frames each, the histogram testdata/kernel/kasan.sh's kernels print), it
// prints only the model's prediction for a real KASAN boot of that shape:
// what those recordings cost with the SCS copy and with the FP walk, each
// the whole kasan_save_stack.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/unwindkit/unwindkit/examples/kasan/slab"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

type options struct {
	record    string
	policy    machine.Policy
	pac       bool
	ops       int
	liveIters int
	profile   string
	boot      string
}

func main() {
	var o options
	flag.StringVar(&o.record, "record", "scs", "how kmalloc and kfree record stacks on the model: scs, fp or none")
	flag.TextVar(&o.policy, "policy", machine.ThreadInfo, "shadow call stack entry policy: thread_info, on-stack or per-cpu")
	flag.BoolVar(&o.pac, "pac", true, "sign return addresses (pac-ret)")
	flag.IntVar(&o.ops, "ops", 20000, "operations of the model's random workload")
	flag.IntVar(&o.liveIters, "live", 2000, "allocations per goroutine of the live workload")
	flag.StringVar(&o.profile, "profile", "", "write the live tracker's allocation profile (pprof format) to this file")
	flag.StringVar(&o.boot, "boot", "", "CALLS,DEPTH or \"D:N D:N ...\": only print the model's cost of that many recordings of that many frames by each technique (a real KASAN boot's shape: testdata/kernel/kasan.sh's kernels print the histogram)")
	flag.Parse()
	if o.boot != "" {
		b, err := parseBootShape(o.boot)
		if err == nil {
			err = predictBoot(os.Stdout, b, o)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kasan:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "kasan:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, o options) error {
	rec, err := slab.ParseRecord(o.record)
	if err != nil {
		return err
	}
	pol := o.policy
	cfg := slab.Config{Record: rec, PAC: o.pac, Policy: pol, CPUs: 2}
	fmt.Fprintf(w, "unwindkit KASAN model: 2 CPUs, stacks recorded by %s, SCS policy %v, PAC %v\n\n", rec, pol, o.pac)

	// The scripted run with the planted bugs.
	sim, err := slab.New(cfg)
	if err != nil {
		return err
	}
	reports, err := sim.Demo()
	if err != nil {
		return err
	}
	for _, r := range reports {
		fmt.Fprint(w, r.String())
		fmt.Fprintln(w)
	}

	// The random workload.
	if o.ops > 0 {
		sim, err := slab.New(cfg)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := sim.Run(slab.DefaultWorkload(o.ops)); err != nil {
			return err
		}
		el := time.Since(start)
		st := sim.Stats()
		ds := sim.Slab().Depot.Stats()
		fmt.Fprintf(w, "Random workload: %d ops in %v: %d allocs, %d frees, %d checked reads, %d IRQs, %d SDEI events, %d task switches, %d reports\n",
			o.ops, el.Round(time.Millisecond), st.Allocs, st.Frees, st.Reads, st.IRQs, st.SDEIs, st.Switches, len(sim.Reports()))
		fmt.Fprintf(w, "Stack depot: %d distinct traces (%d bytes of pool), %d hits, %d misses; %d recordings ended with an unwinder error\n\n",
			ds.InUse, ds.UsedBytes, ds.Hits, ds.Misses, st.UnwindErrors)
	}

	// The live Go workload.
	t, err := newLiveTracker()
	if err != nil {
		return err
	}
	start := time.Now()
	lw := runLive(t, o.liveIters)
	el := time.Since(start)
	liveBugs(lw)
	fmt.Fprintf(w, "Live Go workload (%s): %d allocs, %d frees, %d checked reads in %v; %d distinct allocation stacks, %d distinct traces in the depot\n\n",
		liveUnwinderName, lw.allocs.Load(), lw.frees.Load(), lw.reads.Load(), el.Round(time.Millisecond), len(t.stats), t.d.Stats().InUse)
	for _, r := range t.reports {
		fmt.Fprintln(w, r.text)
	}
	if o.profile != "" {
		f, err := os.Create(o.profile)
		if err != nil {
			return err
		}
		if err := t.WriteProfile(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(w, "Wrote the live allocation profile to %s: go tool pprof -top %s\n", o.profile, o.profile)
	}
	return nil
}
