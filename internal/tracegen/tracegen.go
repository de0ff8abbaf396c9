// Package tracegen generates kernel-like stack traces for the depot's
// tests and benchmarks: one generator, so that both measure the same kind
// of traces.
package tracegen

import (
	"math/rand/v2"
	"slices"
	"unsafe"
)

// KernelText is a plausible arm64 kernel text base for generated frames.
const KernelText = 0xffff800080010000

// Kernel returns n distinct traces of depth frames, deterministic in seed.
// Outer frames are shared between traces, as real call stacks share their
// roots; 1 to depth innermost frames make each trace unique. Every frame
// is a 4-byte aligned address in the 16 MiB above KernelText.
func Kernel(n, depth int, seed uint64) [][]uint64 {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	roots := make([]uint64, depth)
	for i := range roots {
		roots[i] = KernelText + uint64(r.IntN(1<<24))&^3
	}
	seen := map[string]bool{}
	out := make([][]uint64, 0, n)
	for len(out) < n {
		t := slices.Clone(roots)
		k := 1 + r.IntN(depth) // frames that differ from the shared root
		for i := range k {
			t[i] = KernelText + uint64(r.IntN(1<<24))&^3
		}
		// t never changes once generated: the key may view its bytes.
		if key := unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(t))), 8*len(t)); !seen[key] {
			seen[key] = true
			out = append(out, t)
		}
	}
	return out
}
