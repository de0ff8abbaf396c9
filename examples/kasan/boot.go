package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/unwindkit/unwindkit/examples/kasan/slab"
)

// bootShape is -boot's value: how many kasan_save_stack calls a real boot
// made and their mean depth (kasan.sh's kernels print both).
type bootShape struct{ calls, depth int }

func parseBootShape(s string) (bootShape, error) {
	c, d, ok := strings.Cut(s, ",")
	calls, err1 := strconv.Atoi(c)
	depth, err2 := strconv.Atoi(d)
	if !ok || err1 != nil || err2 != nil || calls <= 0 || depth <= 0 {
		return bootShape{}, fmt.Errorf("-boot %q: want CALLS,DEPTH (two positive integers)", s)
	}
	return bootShape{calls, depth}, nil
}

// bootCost is the model's cost of one technique on a boot-shaped workload.
type bootCost struct {
	rec    slab.Record
	frames int           // frames per recording, as the depot keeps them
	each   time.Duration // one recording (kasan_save_stack: source, unwind, depot hit)
}

// predictBoot times, on the model, recordings of b.depth frames by the SCS
// copy and by the FP walk (each the whole kasan_save_stack of
// slab.RecordBench: the unwinder's source, the walk, the depot save) and
// prints what b.calls of them cost: the model's prediction for the
// collection part of a real KASAN boot, beside the kernel's measured
// counts (testdata/kernel/kasan.sh). The two are timed in alternation, the
// least of 15 rounds each, so that a slow stretch of the machine's falls
// on both.
func predictBoot(w io.Writer, b bootShape, o options) error {
	var costs []bootCost
	var loops []func(int) error
	for _, rec := range []slab.Record{slab.RecordFP, slab.RecordSCS} {
		rb, err := bootRecording(rec, b.depth, o)
		if err != nil {
			return err
		}
		costs = append(costs, bootCost{rec: rec, frames: rb.Frames, each: time.Duration(1 << 62)})
		loops = append(loops, rb.All)
	}
	const per = 20000
	for range 15 {
		for i, all := range loops {
			start := time.Now()
			if err := all(per); err != nil {
				return err
			}
			costs[i].each = min(costs[i].each, time.Since(start)/per)
		}
	}
	fmt.Fprintf(w, "Model prediction: %d kasan_save_stack calls of %d frames (SCS policy %v, PAC %v)\n", b.calls, b.depth, o.policy, o.pac)
	for _, c := range costs {
		total := c.each * time.Duration(b.calls)
		fmt.Fprintf(w, "  %-3v %8.1f ns per recording, %5.2f ns per frame, %v for all calls\n",
			c.rec, float64(c.each.Nanoseconds()), float64(c.each.Nanoseconds())/float64(c.frames), total.Round(time.Microsecond))
	}
	fmt.Fprintf(w, "  fp/scs collection cost: %.2fx; none collects nothing (0)\n",
		float64(costs[0].each)/float64(costs[1].each))
	return nil
}

// bootRecording finds the model path whose recording keeps depth frames
// and returns the loops that record there.
func bootRecording(rec slab.Record, depth int, o options) (*slab.RecordBench, error) {
	try := func(n int) (*slab.RecordBench, error) {
		s, err := slab.New(slab.Config{Record: rec, PAC: o.pac, Policy: o.policy, DeepPath: n})
		if err != nil {
			return nil, err
		}
		return s.RecordBench(false)
	}
	rb, err := try(depth)
	if err != nil {
		return nil, err
	}
	// The recording also keeps the frames above the path (the task's
	// entry, ret_from_fork, ...): shorten the path by as many.
	n := depth - (rb.Frames - depth)
	if n < 1 {
		return nil, fmt.Errorf("-boot: the model's shallowest recording keeps %d frames, more than %d", rb.Frames-depth+1, depth)
	}
	if rb, err = try(n); err != nil {
		return nil, err
	}
	if rb.Frames != depth {
		return nil, fmt.Errorf("-boot: a path of %d calls keeps %d frames, not %d", n, rb.Frames, depth)
	}
	return rb, nil
}
