package machine_test

import (
	"fmt"
	"testing"

	"github.com/unwindkit/unwindkit/internal/benchbody"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
)

// BenchmarkModelSave is the SCS copy against the FP walk on the same
// modelled stack (a recursion depth frames deep), through unwind.Save: the
// body examples/compare runs for the README's first table.
//
//	go test -run '^$' -bench ModelSave -count 6 ./unwind/machine
func BenchmarkModelSave(b *testing.B) {
	for _, pac := range []bool{false, true} {
		for _, depth := range benchbody.ModelDepths {
			for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
				b.Run(fmt.Sprintf("pac=%v/depth=%d/%v", pac, depth, method), func(b *testing.B) {
					src, err := benchbody.ModelSource(method, pac, depth)
					if err != nil {
						b.Fatal(err)
					}
					benchbody.ModelSave(b, src, depth)
				})
			}
		}
	}
}

// BenchmarkEntryExit enters and leaves each context under each x18 policy:
// the bodies of examples/compare's policy table.
//
//	go test -run '^$' -bench EntryExit -count 6 ./unwind/machine
func BenchmarkEntryExit(b *testing.B) {
	for _, ctx := range benchbody.EntryContexts {
		for _, pol := range scs.Policies {
			b.Run(fmt.Sprintf("%v/%v", ctx, pol), func(b *testing.B) {
				body, err := benchbody.EntryExit(pol, ctx)
				if err != nil {
					b.Fatal(err)
				}
				body(b)
			})
		}
	}
}

// BenchmarkSaveToDepot is KASAN's kasan_save_stack on a hit, on the same
// modelled stacks as BenchmarkModelSave: the unwind alone, unwind then
// depot.Save (two calls), and unwind.SaveToDepot (one call: the unwind
// into at most the depot's MaxFrames, then one sweep that hashes the
// stored frames, and the lookup).
//
//	go test -run '^$' -bench SaveToDepot -count 6 ./unwind/machine
func BenchmarkSaveToDepot(b *testing.B) {
	for _, depth := range benchbody.ModelDepths {
		for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
			for _, way := range benchbody.SaveToDepotWays {
				b.Run(fmt.Sprintf("depth=%d/%v/%s", depth, method, way), func(b *testing.B) {
					src, err := benchbody.ModelSource(method, false, depth)
					if err != nil {
						b.Fatal(err)
					}
					benchbody.ModelSaveToDepot(b, src, depth, way)
				})
			}
		}
	}
}
