package ptrauth

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// xxh64 is a plain XXH64 (xxHash, Yann Collet) of b with seed, written in
// the test from the algorithm's description, to check impDef against.
func xxh64(b []byte, seed uint64) uint64 {
	const p5 = 0x27D4EB2F165667C5
	p1, p2, p3, p4 := uint64(prime64x1), uint64(prime64x2), uint64(prime64x3), uint64(prime64x4)
	n := uint64(len(b))
	var h uint64
	if len(b) >= 32 {
		v1, v2, v3, v4 := seed+p1+p2, seed+p2, seed, seed-p1
		for ; len(b) >= 32; b = b[32:] {
			v1 = xxhRound(v1, binary.LittleEndian.Uint64(b))
			v2 = xxhRound(v2, binary.LittleEndian.Uint64(b[8:]))
			v3 = xxhRound(v3, binary.LittleEndian.Uint64(b[16:]))
			v4 = xxhRound(v4, binary.LittleEndian.Uint64(b[24:]))
		}
		h = xxhMerge(v1, v2, v3, v4)
	} else {
		h = seed + p5
	}
	h += n
	for ; len(b) >= 8; b = b[8:] {
		h ^= xxhRound(0, binary.LittleEndian.Uint64(b))
		h = bits.RotateLeft64(h, 27)*p1 + p4
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b)) * p1
		h = bits.RotateLeft64(h, 23)*p2 + p3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * p5
		h = bits.RotateLeft64(h, 11) * p1
	}
	return xxhAvalanche(h)
}

// Published XXH64 values (seed 0), as quoted by github.com/cespare/xxhash's
// tests; the 63-byte input runs the 32-byte stripe loop that QEMU's hash
// uses.
func TestXXH64Reference(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
	}{
		{"", 0xef46db3751d8e999},
		{"a", 0xd24ec4f1a98c6e5b},
		{"as", 0x1c330fb2d66be179},
		{"asd", 0x631c37ce72a97393},
		{"asdf", 0x415872f599cea71e},
		{"Call me Ishmael. Some years ago--never mind how long precisely-", 0x02a2e85470d6fd96},
	} {
		if got := xxh64([]byte(tt.in), 0); got != tt.want {
			t.Errorf("XXH64(%q) = %#x, want %#x", tt.in, got, tt.want)
		}
	}
}

func oddInverse(x uint64) uint64 {
	inv := x // correct to 3 bits for odd x; Newton doubles the bits
	for range 5 {
		inv *= 2 - x*inv
	}
	return inv
}

// unAvalanche inverts XXH64's final mix (xorshifts and odd multiplies).
func unAvalanche(h uint64) uint64 {
	h ^= h >> 32
	h *= oddInverse(prime64x3)
	h ^= h>>29 ^ h>>58
	h *= oddInverse(prime64x2)
	h ^= h >> 33
	return h
}

// TestImpDefIsXXH64WithoutLength: QEMU's qemu_xxhash64_4 is XXH64 of the
// 32 little-endian bytes data|modifier|key.Lo|key.Hi with seed 1 (
// QEMU_XXHASH_SEED), minus the "h64 += len" step. Undo the avalanche of
// the real XXH64, subtract 32, redo it: that must be ImpDef.
func TestImpDefIsXXH64WithoutLength(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for range 1000 {
		data, mod, key := r.Uint64(), r.Uint64(), Key{Hi: r.Uint64(), Lo: r.Uint64()}
		var buf [32]byte
		binary.LittleEndian.PutUint64(buf[0:], data)
		binary.LittleEndian.PutUint64(buf[8:], mod)
		binary.LittleEndian.PutUint64(buf[16:], key.Lo)
		binary.LittleEndian.PutUint64(buf[24:], key.Hi)
		full := xxh64(buf[:], impDefSeed)
		if unAvalanche(xxhAvalanche(full)) != full {
			t.Fatal("unAvalanche does not invert xxhAvalanche")
		}
		want := xxhAvalanche(unAvalanche(full) - 32)
		if got := ComputePAC(data, mod, key, ImpDef); got != want {
			t.Fatalf("ImpDef(%#x, %#x, %#x) = %#x, want %#x", data, mod, key, got, want)
		}
	}
}

func TestImpDefSensitivity(t *testing.T) {
	k := Key{Hi: 1, Lo: 2}
	a := ComputePAC(0x0000aaaabbbbccc0, 0x1000, k, ImpDef)
	if a != ComputePAC(0x0000aaaabbbbccc0, 0x1000, k, ImpDef) {
		t.Fatal("ImpDef is not deterministic")
	}
	for _, b := range []uint64{
		ComputePAC(0x0000aaaabbbbccc0, 0x1010, k, ImpDef),
		ComputePAC(0x0000aaaabbbbccc0, 0x1000, Key{Hi: 1, Lo: 3}, ImpDef),
		ComputePAC(0x0000aaaabbbbccc0, 0x1000, Key{Hi: 0, Lo: 2}, ImpDef),
		ComputePAC(0x0000aaaabbbbccc4, 0x1000, k, ImpDef),
	} {
		if b == a {
			t.Errorf("ImpDef ignores a changed input: %#x", a)
		}
		// XXH64 avalanches: a one-bit change flips about half the bits.
		if d := bits.OnesCount64(a ^ b); d < 16 || d > 48 {
			t.Errorf("ImpDef: one-bit input change flipped %d output bits", d)
		}
	}
}
