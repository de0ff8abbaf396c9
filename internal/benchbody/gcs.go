package benchbody

import (
	"fmt"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/gcs"
)

// GCSView returns the View of a modelled user thread's Guarded Control
// Stack (package unwind/gcs, a 16 KiB GCS) depth calls deep, the GCS
// counterpart of RecursionMachine: one outer call, then depth-1 calls
// from the same call site of a recursion. It is checked to copy exactly
// depth frames.
func GCSView(depth int) (gcs.View, error) {
	th, err := gcs.NewThread(0x7fff00000000, 16384)
	if err != nil {
		return gcs.View{}, err
	}
	if err := th.Call(0x400100); err != nil {
		return gcs.View{}, err
	}
	for range depth - 1 {
		if err := th.Call(0x400240); err != nil {
			return gcs.View{}, err
		}
	}
	v := th.View()
	store := make([]uint64, depth+8)
	if n, err := gcs.Save(&v, store, 0); err != nil || n != depth {
		return gcs.View{}, fmt.Errorf("gcs at depth %d: %d frames, %v", depth, n, err)
	}
	return v, nil
}

// GCSSave copies v with gcs.Save into a reused store, as ModelSave
// unwinds a Source, and reports ns/frame for depth frames.
func GCSSave(b *testing.B, v *gcs.View, depth int) {
	store := make([]uint64, depth+8)
	b.ReportAllocs()
	for b.Loop() {
		gcs.Save(v, store, 0)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(depth), "ns/frame")
}
