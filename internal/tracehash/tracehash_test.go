package tracehash

import (
	"math/rand/v2"
	"testing"
)

// TestSumIsSteps checks that Sum, four frames a step, equals Step frame by
// frame for every length up to 70 (every remainder and several blocks).
func TestSumIsSteps(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 70; n++ {
		f := make([]uint64, n)
		for i := range f {
			f[i] = r.Uint64()
		}
		seed, mul := r.Uint64(), r.Uint64()|1
		h := seed
		for _, x := range f {
			h = Step(h, x, seed, mul)
		}
		if got := Sum(f, seed, mul); got != h {
			t.Fatalf("n=%d: Sum %#x, steps %#x", n, got, h)
		}
	}
}

// TestNoEasyCollisions checks that traces a stack produces naturally do
// not collide: every permutation of 6 distinct frames, and traces that
// differ in one bit of one frame, all hash apart.
func TestNoEasyCollisions(t *testing.T) {
	seed, mul := uint64(0x1234567), uint64(0x9e3779b97f4a7c15)
	seen := map[uint64][]uint64{}
	add := func(f []uint64) {
		k := Finish(Sum(f, seed, mul), len(f))
		if old, ok := seen[k]; ok {
			t.Fatalf("collision: %x and %x", old, f)
		}
		seen[k] = append([]uint64(nil), f...)
	}
	base := []uint64{0x401000, 0x401040, 0x402000, 0x4a0010, 0x4a0018, 0x500000}
	var perm func(k int)
	perm = func(k int) {
		if k == len(base) {
			add(base)
			return
		}
		for i := k; i < len(base); i++ {
			base[k], base[i] = base[i], base[k]
			perm(k + 1)
			base[k], base[i] = base[i], base[k]
		}
	}
	perm(0)
	f := make([]uint64, 32)
	for i := range f {
		f[i] = 0x400000 + uint64(i)*0x40
	}
	for i := range f {
		for b := range 48 {
			f[i] ^= 1 << b
			add(f)
			f[i] ^= 1 << b
		}
	}
}
