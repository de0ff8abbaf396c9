// Package tracehash is the stack depot's trace hash, in one place for the
// depot (package depot, which exports it as depot.HashKey) and for the
// producers that hash a trace while they make it (the live Go walker in
// internal/live, the SCS copy and the FP walk), so that every one computes
// the same value.
//
// The hash of frames f[0..n) under a key (seed, mul), mul odd:
//
//	h = seed
//	for each frame f:  h = rotl(h, Rot) ^ mix(f)
//	mix(x) = t ^ t>>Fold, where t = x * mul (mod 2^64)
//	final = Finish(h, n)
//
// Each step is one multiply, a shift and an xor off the hash's own chain and a rotate and an
// xor on it (2 cycles a frame), so a walk whose chain of loads takes longer
// hides it. Sum computes the same value four frames a step. It is not a
// cryptographic hash: the depot compares every frame of a candidate and
// bounds what colliding traces cost it (see package depot).
package tracehash

import "math/bits"

// Rot is the rotation of each step.
const Rot = 29

// Step returns h extended by frame f under the key (seed, mul).
func Step(h, f, seed, mul uint64) uint64 {
	return bits.RotateLeft64(h, Rot) ^ mix(f, mul)
}

// mix multiplies x by mul and folds the product's high bits into its low
// ones. (Without the fold a product's bit b depends only on x's bits up to
// b, and flipping bit b of one frame and bit b+1 of another could cancel
// out after the rotations: a test found such a pair of 32-frame traces.
// The 128-bit product's halves folded, hi ^ lo, cost 1.2x as much.)
func mix(x, mul uint64) uint64 {
	t := x * mul
	return t ^ t>>Fold
}

// Fold is the shift of mix's fold.
const Fold = 29

// Finish mixes the running hash h of n frames into the final hash
// (murmur3's fmix64 of h plus n times a constant).
func Finish(h uint64, n int) uint64 {
	h ^= uint64(n) * 0x9e3779b97f4a7c15
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Sum returns the running hash (before Finish) of frames f under the key:
// Step over every frame, four a step (the rotations of a block are
// constants, so the four products overlap and only one rotate and four
// xors stay on the chain).
func Sum(f []uint64, seed, mul uint64) uint64 {
	h := seed
	for len(f) >= 4 {
		b := (*[4]uint64)(f)
		h = bits.RotateLeft64(h, 4*Rot%64) ^
			bits.RotateLeft64(mix(b[0], mul), 3*Rot%64) ^
			bits.RotateLeft64(mix(b[1], mul), 2*Rot%64) ^
			bits.RotateLeft64(mix(b[2], mul), Rot) ^
			mix(b[3], mul)
		f = f[4:]
	}
	for _, x := range f {
		h = Step(h, x, seed, mul)
	}
	return h
}
