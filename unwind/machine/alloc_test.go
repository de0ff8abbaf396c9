package machine

import (
	"testing"
)

// TestCallReturnAllocs: driving a CPU through a call and its return
// allocates nothing, in every configuration that changes what Call and
// Return write (SCS on and off, PAC, the tracers).
func TestCallReturnAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"default", nil},
		{"no-scs", func(c *Config) { c.SCS = false }},
		{"pac", func(c *Config) { c.PAC = true }},
		{"per-cpu+keep-pc", func(c *Config) { c.Policy = PerCPU; c.KeepInterruptedPC = true }},
		{"tracers", func(c *Config) { c.FGraph, c.Kretprobes = true, true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newTestMachine(t, tc.mod)
			must(t, c.Call("do_work"))
			// Warm up: the first call at a depth may grow the context's
			// activation list.
			must(t, c.Call("alloc_obj"))
			must(t, c.Return())
			allocs := testing.AllocsPerRun(1000, func() {
				if err := c.Call("alloc_obj"); err != nil {
					t.Fatal(err)
				}
				if err := c.Return(); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("Call + Return: %v allocations, want 0", allocs)
			}
		})
	}
}
