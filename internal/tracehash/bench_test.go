package tracehash

import (
	"hash/maphash"
	"testing"
	"unsafe"
)

var sink uint64

// BenchmarkSum compares Sum over a 32-frame trace with the runtime's
// memhash of its bytes (maphash.Comparable of a string), interleaved by
// the testing package's sub-benchmarks.
func BenchmarkSum(b *testing.B) {
	f := make([]uint64, 32)
	for i := range f {
		f[i] = 0xffff800010000000 + uint64(i)*0x1234
	}
	b.Run("tracehash", func(b *testing.B) {
		for b.Loop() {
			sink += Finish(Sum(f, 0x1234, 0x9e3779b97f4a7c15), len(f))
		}
	})
	seed := maphash.MakeSeed()
	s := unsafe.String((*byte)(unsafe.Pointer(&f[0])), 8*len(f))
	b.Run("maphash", func(b *testing.B) {
		for b.Loop() {
			sink += maphash.Comparable(seed, s)
		}
	})
}
