package ptrauth

import (
	"fmt"
	"math/bits"
)

// Key is a 128-bit pointer-authentication key, as held in a pair of
// AP*Key{Hi,Lo}_EL1 registers. Hi is bits 127:64 (the Arm pseudocode's
// key0, QARMA's whitening key w0); Lo is bits 63:0 (key1, QARMA's core key
// k0).
type Key struct {
	Hi, Lo uint64
}

// Algorithm selects the PAC function behind ComputePAC. Its String is the
// algorithm's name: "QARMA5", "QARMA3" or "ImpDef".
type Algorithm uint8

//go:generate go tool stringer -type=Algorithm -output=algorithm_string.go

const (
	// QARMA5 is the architected QARMA-64 with σ2 and five forward rounds
	// (FEAT_PACQARMA5), the Arm ARM's ComputePAC.
	QARMA5 Algorithm = iota
	// QARMA3 is the architected QARMA-64 with σ1 and three forward rounds
	// (FEAT_PACQARMA3), ComputePAC with IsFeatureImplemented(FEAT_PACQARMA3).
	QARMA3
	// ImpDef is QEMU's implementation-defined algorithm (FEAT_PACIMP on
	// QEMU's "max" CPU with pauth-impdef=on): an XXH64-style hash of data,
	// modifier, key.Lo and key.Hi.
	ImpDef
)

// KeyID names the key an AddPAC or Auth uses, and with it the kind of
// pointer: IA and IB sign instruction addresses (PACIA, PACIASP, AUTIB,
// RETAA, BRAB, ...), DA and DB data addresses (PACDA, AUTDB, LDRAA, ...),
// and GA is the generic key of PACGA. The kind decides which TBI rule the
// PAC field follows (see [Layout.DataMasks]); the key number (A or B)
// decides the PAuth1 error code written into a pointer that fails
// authentication. Its String is "IA", "IB", "DA", "DB" or "GA".
type KeyID uint8

//go:generate go tool stringer -type=KeyID -trimprefix=Key -output=keyid_string.go

const (
	// KeyIA is APIAKey (PACIA, PACIASP, AUTIASP, RETAA). PAuth1 error code
	// 0b01.
	KeyIA KeyID = iota
	// KeyIB is APIBKey (PACIB, PACIBSP, AUTIBSP, RETAB). PAuth1 error code
	// 0b10.
	KeyIB
	// KeyDA is APDAKey (PACDA, AUTDA, LDRAA), for data pointers. PAuth1
	// error code 0b01.
	KeyDA
	// KeyDB is APDBKey (PACDB, AUTDB, LDRAB), for data pointers. PAuth1
	// error code 0b10.
	KeyDB
	// KeyGA is APGAKey, used only by PACGA (see [PACGA]); AddPAC and Auth
	// reject it.
	KeyGA
)

// Data reports whether k signs data pointers (DA, DB).
func (k KeyID) Data() bool { return k == KeyDA || k == KeyDB }

// number is the Arm pseudocode's key_number: 0 for A, 1 for B.
func (k KeyID) number() uint64 { return uint64(k) & 1 }

// checkPointerKey returns an error unless k is IA, IB, DA or DB.
func checkPointerKey(k KeyID) error {
	if k > KeyDB {
		if k == KeyGA {
			return fmt.Errorf("%w: key GA signs no pointer (use PACGA)", ErrInvalid)
		}
		return fmt.Errorf("%w: unknown %v", ErrInvalid, k)
	}
	return nil
}

// Valid returns nil for QARMA5, QARMA3 and ImpDef, else an error wrapping
// [ErrInvalid].
func (a Algorithm) Valid() error {
	if a > ImpDef {
		return fmt.Errorf("%w: unknown %v", ErrInvalid, a)
	}
	return nil
}

// ComputePAC returns the 64-bit pointer authentication code of data under
// modifier and key, the Arm ARM's ComputePAC(data, modifier, key<127:64>,
// key<63:0>) (or QEMU's implementation-defined hash for ImpDef). Sign and
// Auth take the PAC-field bits of this value. It panics on an unknown
// Algorithm (a programming error; see [Algorithm.Valid]): the Layout
// methods check it first and return an error instead.
func ComputePAC(data, modifier uint64, key Key, alg Algorithm) uint64 {
	switch alg {
	case QARMA5:
		return qarma5(data, modifier, key.Hi, key.Lo)
	case QARMA3:
		return qarma3(data, modifier, key.Hi, key.Lo)
	case ImpDef:
		return impDef(data, modifier, key.Lo, key.Hi)
	}
	panic("ptrauth: ComputePAC with unknown " + alg.String())
}

// XXH64 primes (xxHash, Yann Collet).
const (
	prime64x1 = 0x9E3779B185EBCA87
	prime64x2 = 0xC2B2AE3D27D4EB4F
	prime64x3 = 0x165667B19E3779F9
	prime64x4 = 0x85EBCA77C2B2AE63
)

// impDefSeed is QEMU_XXHASH_SEED.
const impDefSeed = 1

// impDef is QEMU's implementation-defined PAC (pauth_computepac_impdef in
// target/arm/tcg/pauth_helper.c, qemu_xxhash64_4 in include/qemu/xxhash.h):
// the 32-byte XXH64 of a, b, c, d (here data, modifier, key.Lo, key.Hi)
// with seed 1, except that QEMU leaves out XXH64's "h64 += length" step
// before the final avalanche. Written from that description.
func impDef(a, b, c, d uint64) uint64 {
	seed := uint64(impDefSeed)
	p1, p2 := uint64(prime64x1), uint64(prime64x2)
	v1 := xxhRound(seed+p1+p2, a) // wrapping adds, as in C
	v2 := xxhRound(seed+p2, b)
	v3 := xxhRound(seed, c)
	v4 := xxhRound(seed-p1, d)
	return xxhAvalanche(xxhMerge(v1, v2, v3, v4))
}

func xxhRound(acc, in uint64) uint64 {
	return bits.RotateLeft64(acc+in*prime64x2, 31) * prime64x1
}

func xxhMerge(v1, v2, v3, v4 uint64) uint64 {
	h := bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) +
		bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
	for _, v := range [4]uint64{v1, v2, v3, v4} {
		h = (h^xxhRound(0, v))*prime64x1 + prime64x4
	}
	return h
}

func xxhAvalanche(h uint64) uint64 {
	h ^= h >> 33
	h *= prime64x2
	h ^= h >> 29
	h *= prime64x3
	h ^= h >> 32
	return h
}
