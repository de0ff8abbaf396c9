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
// made at each depth (kasan.sh's kernels print the histogram), or all at
// one depth.
type bootShape []bootDepth

type bootDepth struct{ depth, calls int }

// parseBootShape reads "CALLS,DEPTH" (every call at one depth) or
// "D:N D:N ..." (N calls of D frames each; commas may stand for the
// spaces), the histogram kasan.sh's kernels print as "kasan_save_stack
// depths: ...".
func parseBootShape(s string) (bootShape, error) {
	bad := fmt.Errorf("-boot %q: want CALLS,DEPTH or D:N D:N ... (positive integers)", s)
	if !strings.Contains(s, ":") {
		c, d, ok := strings.Cut(s, ",")
		calls, err1 := strconv.Atoi(c)
		depth, err2 := strconv.Atoi(d)
		if !ok || err1 != nil || err2 != nil || calls <= 0 || depth <= 0 {
			return nil, bad
		}
		return bootShape{{depth, calls}}, nil
	}
	var b bootShape
	seen := map[int]bool{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		d, n, ok := strings.Cut(f, ":")
		depth, err1 := strconv.Atoi(d)
		calls, err2 := strconv.Atoi(n)
		if !ok || err1 != nil || err2 != nil || depth <= 0 || calls <= 0 || seen[depth] {
			return nil, bad
		}
		seen[depth] = true
		b = append(b, bootDepth{depth, calls})
	}
	if len(b) == 0 {
		return nil, bad
	}
	return b, nil
}

// predictBoot times, on the model, recordings at each depth of b by the
// SCS copy and by the FP walk (each the whole kasan_save_stack of
// slab.RecordBench: the unwinder's source, the walk, the depot save) and
// prints what b's calls cost in all: the model's prediction for the
// collection part of a real KASAN boot, beside the kernel's measured
// counts (testdata/kernel/kasan.sh). At each depth the two are timed in
// alternation, the least of 15 rounds each, so that a slow stretch of the
// machine's falls on both. A depth below the model's shallowest recording
// is timed at that one, and the output says for how many calls.
func predictBoot(w io.Writer, b bootShape, o options) error {
	recs := []slab.Record{slab.RecordFP, slab.RecordSCS}
	total := make([]time.Duration, len(recs))
	var calls, frames, clamped, minDepth int
	for _, bd := range b {
		depth := bd.depth
		var loops []func(int) error
		each := make([]time.Duration, len(recs))
		for i, rec := range recs {
			rb, least, err := bootRecording(rec, depth, o)
			if err != nil {
				return err
			}
			if rb == nil { // below the model's shallowest recording
				if rb, _, err = bootRecording(rec, least, o); err != nil || rb == nil {
					return fmt.Errorf("-boot: no recording of %d frames: %v", least, err)
				}
				if i == 0 {
					clamped += bd.calls
				}
				minDepth = least
			}
			loops = append(loops, rb.All)
			each[i] = time.Duration(1 << 62)
		}
		const per = 5000
		for range 15 {
			for i, all := range loops {
				start := time.Now()
				if err := all(per); err != nil {
					return err
				}
				each[i] = min(each[i], time.Since(start)/per)
			}
		}
		for i := range recs {
			total[i] += each[i] * time.Duration(bd.calls)
		}
		calls += bd.calls
		frames += bd.calls * depth
	}
	if len(b) == 1 {
		fmt.Fprintf(w, "Model prediction: %d kasan_save_stack calls of %d frames (SCS policy %v, PAC %v)\n", calls, b[0].depth, o.policy, o.pac)
	} else {
		fmt.Fprintf(w, "Model prediction: %d kasan_save_stack calls at %d depths, %.1f frames on average (SCS policy %v, PAC %v)\n",
			calls, len(b), float64(frames)/float64(calls), o.policy, o.pac)
	}
	for i, rec := range recs {
		each := float64(total[i].Nanoseconds()) / float64(calls)
		fmt.Fprintf(w, "  %-3v %8.1f ns per recording, %5.2f ns per frame, %v for all calls\n",
			rec, each, each*float64(calls)/float64(frames), total[i].Round(time.Microsecond))
	}
	fmt.Fprintf(w, "  fp/scs collection cost: %.2fx; none collects nothing (0)\n", float64(total[0])/float64(total[1]))
	if clamped > 0 {
		fmt.Fprintf(w, "  %d calls were shallower than the model's shallowest recording (%d frames) and are timed at it\n", clamped, minDepth)
	}
	return nil
}

// bootRecording finds the model path whose recording keeps depth frames
// and returns the loops that record there. A depth below the model's
// shallowest recording gives a nil RecordBench and that recording's
// depth.
func bootRecording(rec slab.Record, depth int, o options) (*slab.RecordBench, int, error) {
	try := func(n int) (*slab.RecordBench, error) {
		s, err := slab.New(slab.Config{Record: rec, PAC: o.pac, Policy: o.policy, DeepPath: n})
		if err != nil {
			return nil, err
		}
		return s.RecordBench(false)
	}
	rb, err := try(1)
	if err != nil {
		return nil, 0, err
	}
	// The recording keeps the frames above the path (the task's entry,
	// ret_from_fork, ...) too: a path of n calls keeps n + above.
	above := rb.Frames - 1
	if depth <= above {
		return nil, above + 1, nil
	}
	if rb, err = try(depth - above); err != nil {
		return nil, 0, err
	}
	if rb.Frames != depth {
		return nil, 0, fmt.Errorf("-boot: a path of %d calls keeps %d frames, not %d", depth-above, rb.Frames, depth)
	}
	return rb, depth, nil
}
