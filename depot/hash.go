package depot

import (
	"hash/maphash"
	"math/bits"
	"unsafe"
)

// wordIs64 selects hashing a trace's bytes: []uint64 and []uintptr traces
// of the same values have the same bytes only when uintptr has 8 bytes.
const wordIs64 = unsafe.Sizeof(uintptr(0)) == 8

// hashFrames hashes the frames of trace with d's seed. On 64-bit targets it
// is the hash a map[string] uses, applied to the frames' bytes in one call
// (hash/maphash.Comparable of a string: the runtime's memhash, AES-based
// where the CPU has AES, without allocating; maphash.Bytes would hash in
// 128-byte pieces at twice the cost for a 32-frame trace), so a depot
// lookup pays no more for hashing than a map lookup of the same bytes. It
// is not a cryptographic hash: the depot compares every frame of a
// candidate before it trusts a match, so a collision only costs a longer
// chain; the seed is random per depot so that crafted traces cannot force
// long chains across runs.
func hashFrames[T ~uint64 | ~uintptr](d *Depot, trace []T) uint64 {
	if wordIs64 {
		return maphash.Comparable(d.seed, unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(trace))), 8*len(trace)))
	}
	return hashTrace(d.seed64, trace)
}

// Odd 64-bit constants with well-spread bits, used as lane keys.
const (
	key0 = 0xa0761d6478bd642f
	key1 = 0xe7037ed1a0b428db
	key2 = 0x8ebc6af09c88c6e3
	key3 = 0x589965cc75374cc3
)

// fold multiplies a and b to 128 bits and xors the halves: every bit of
// either input reaches the middle bits of the result.
func fold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// hashTrace is the hash of 32-bit targets, where a []uintptr trace must
// hash like the []uint64 trace of the same values. It folds pairs of
// frames, widened to 64 bits, with a 64x64→128-bit multiply, in four
// independent lanes so that the multiplier latency of one lane overlaps
// the others, then folds the lanes, the tail and the length together (the
// multiply-and-fold construction of wyhash-like hashes).
func hashTrace[T ~uint64 | ~uintptr](seed uint64, trace []T) uint64 {
	n := len(trace)
	a, b, c, d := seed, seed^key1, seed^key2, seed^key3
	i := 0
	for ; i+8 <= n; i += 8 {
		t := (*[8]T)(trace[i:])
		a = fold(uint64(t[0])^key1, uint64(t[1])^a)
		b = fold(uint64(t[2])^key2, uint64(t[3])^b)
		c = fold(uint64(t[4])^key3, uint64(t[5])^c)
		d = fold(uint64(t[6])^key0, uint64(t[7])^d)
	}
	a ^= b ^ c ^ d
	for ; i+2 <= n; i += 2 {
		a = fold(uint64(trace[i])^key1, uint64(trace[i+1])^a)
	}
	if i < n {
		a = fold(uint64(trace[i])^key3, key2^a)
	}
	return fold(a^key1, uint64(n)^key0)
}
