package slab

import (
	"fmt"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/machine"
)

// BenchmarkRecord times one KASAN stack recording at kmalloc (PAC on), in
// task context and in a hard IRQ, with each technique, whole and part by
// part: the RecordBench loops examples/compare runs for its recording
// table, run here by the testing package's loop as there.
//
//	go test -run '^$' -bench Record -count 6 ./examples/kasan/slab
func BenchmarkRecord(b *testing.B) {
	for _, inIRQ := range []bool{false, true} {
		for _, rec := range []Record{RecordSCS, RecordFP} {
			s, err := New(Config{Record: rec, PAC: true, Policy: machine.ThreadInfo})
			if err != nil {
				b.Fatal(err)
			}
			rb, err := s.RecordBench(inIRQ)
			if err != nil {
				b.Fatal(err)
			}
			for _, step := range []struct {
				name string
				f    func(int) error
			}{{"source", rb.Source}, {"unwind", rb.Unwind}, {"depot", rb.Depot}, {"all", rb.All}} {
				b.Run(fmt.Sprintf("irq=%v/%v/%s", inIRQ, rec, step.name), func(b *testing.B) {
					if err := step.f(b.N); err != nil {
						b.Fatal(err)
					}
				})
			}
		}
	}
}
