package benchbody

import (
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Measure runs each body through testing.Benchmark, reps times in turn
// (alternating the order, so that no body always runs first, and
// collecting the heap before each run), for about benchtime each, and
// returns each body's fastest ns per operation: the run least disturbed
// by the rest of the machine, with drift shared fairly between the bodies
// compared.
//
// A body that fails (b.Fatal) in every run is an error. It sets the
// testing package's -test.benchtime flag (registering the
// testing flags first if the program has not).
func Measure(benchtime time.Duration, reps int, bodies ...func(*testing.B)) ([]float64, error) {
	if flag.Lookup("test.benchtime") == nil {
		testing.Init()
	}
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		panic(err) // the flag exists and a duration parses
	}
	best := make([]float64, len(bodies))
	for rep := range max(reps, 1) {
		for k := range bodies {
			i := k
			if rep%2 == 1 {
				i = len(bodies) - 1 - k
			}
			runtime.GC()
			r := testing.Benchmark(bodies[i])
			if r.N == 0 {
				continue // the body failed or skipped
			}
			ns := float64(r.T.Nanoseconds()) / float64(r.N)
			if best[i] == 0 || ns < best[i] {
				best[i] = ns
			}
		}
	}
	for i, ns := range best {
		if ns == 0 {
			return nil, fmt.Errorf("benchmark body %d of %d failed in every run", i+1, len(bodies))
		}
	}
	return best, nil
}
