package ptrauth

import (
	"fmt"
	"math/bits"
)

// This file is the reference QARMA-64 cipher, written from the definitions
// in Avanzi, "The QARMA Block Cipher Family", IACR ToSC 2017(1), section 3
// and appendix A. It favours clarity over speed: every layer works cell by
// cell. The fast ComputePAC (pac.go) is built from these same layers and
// is tested against this file.
//
// The 64-bit state is a 4x4 matrix of 4-bit cells, cell 0 being the most
// significant nibble (bits 63:60) and cell 15 the least significant. That
// is also the layout the Arm ARM's ComputePAC pseudocode uses.

// roundConst are the QARMA-64 round constants c_0..c_7 (digits of pi;
// c_0 = 0). ComputePAC's RC[0..4] are the first five.
var roundConst = [8]uint64{
	0x0000000000000000,
	0x13198A2E03707344,
	0xA4093822299F31D0,
	0x082EFA98EC4E6C89,
	0x452821E638D01377,
	0xBE5466CF34E90C6C,
	0x3F84D5B5B5470917,
	0x9216D5D98979FB1B,
}

// alpha is the reflection constant α of QARMA-64.
const alpha = 0xC0AC29B7C97C50DD

// sboxes are σ0, σ1 and σ2 of the paper. σ0 and σ1 are involutions. Arm's
// QARMA5 ComputePAC uses σ2 (PACSub), QARMA3 uses σ1 (PACSub1).
var sboxes = [3][16]uint8{
	{0, 14, 2, 10, 9, 15, 8, 11, 6, 4, 3, 7, 13, 12, 1, 5},
	{10, 13, 14, 6, 15, 7, 3, 5, 9, 8, 0, 12, 11, 1, 2, 4},
	{11, 6, 8, 15, 12, 0, 9, 14, 3, 7, 4, 5, 13, 2, 1, 10},
}

// invSboxes are the inverses of sboxes, computed at init.
var invSboxes [3][16]uint8

func init() {
	for s := range sboxes {
		for i, v := range sboxes[s] {
			invSboxes[s][v] = uint8(i)
		}
	}
}

// cellTau is the cell shuffle τ: output cell i is input cell cellTau[i].
var cellTau = [16]uint8{0, 11, 6, 13, 10, 1, 12, 7, 5, 14, 3, 8, 15, 4, 9, 2}

// tweakH is the tweak permutation h: output cell i is input cell tweakH[i].
var tweakH = [16]uint8{6, 5, 14, 15, 0, 1, 2, 3, 7, 12, 13, 4, 8, 9, 10, 11}

// lfsrCells are the tweak cells the LFSR ω updates after h.
var lfsrCells = [...]int{0, 1, 3, 4, 8, 11, 13}

func cell(x uint64, i int) uint64 { return x >> (60 - 4*uint(i)) & 0xf }

func withCell(i int, v uint64) uint64 { return (v & 0xf) << (60 - 4*uint(i)) }

// permute returns the state whose cell i is cell p[i] of x.
func permute(x uint64, p *[16]uint8) uint64 {
	var o uint64
	for i := range 16 {
		o |= withCell(i, cell(x, int(p[i])))
	}
	return o
}

// invPermute undoes permute.
func invPermute(x uint64, p *[16]uint8) uint64 {
	var o uint64
	for i := range 16 {
		o |= withCell(int(p[i]), cell(x, i))
	}
	return o
}

// subCells applies the 4-bit S-box sb to every cell.
func subCells(x uint64, sb *[16]uint8) uint64 {
	var o uint64
	for i := range 16 {
		o |= withCell(i, uint64(sb[cell(x, i)]))
	}
	return o
}

// rho rotates a cell left by n bits (ρ^n).
func rho(c uint64, n int) uint64 { return (c<<n | c>>(4-n)) & 0xf }

// mixColumns multiplies the state by M = circ(0, ρ, ρ², ρ). M is an
// involution, so it is also its own inverse.
func mixColumns(x uint64) uint64 {
	exp := [4]int{0, 1, 2, 1} // entry (r, k) is ρ^exp[(k-r) mod 4]; 0 means none
	var o uint64
	for r := range 4 {
		for c := range 4 {
			var v uint64
			for k := range 4 {
				if e := exp[(k-r+4)%4]; e != 0 {
					v ^= rho(cell(x, 4*k+c), e)
				}
			}
			o |= withCell(4*r+c, v)
		}
	}
	return o
}

// lfsr is ω on one cell: (b3, b2, b1, b0) → (b0⊕b1, b3, b2, b1).
func lfsr(c uint64) uint64 { return c>>1 | ((c^c>>1)&1)<<3 }

// invLFSR undoes lfsr.
func invLFSR(c uint64) uint64 { return (c<<1)&0xf | (c>>3^c)&1 }

// tweakForward is one forward tweak update: h, then ω on lfsrCells.
func tweakForward(t uint64) uint64 {
	t = permute(t, &tweakH)
	for _, i := range lfsrCells {
		t = t&^withCell(i, 0xf) | withCell(i, lfsr(cell(t, i)))
	}
	return t
}

// tweakBackward undoes tweakForward.
func tweakBackward(t uint64) uint64 {
	for _, i := range lfsrCells {
		t = t&^withCell(i, 0xf) | withCell(i, invLFSR(cell(t, i)))
	}
	return invPermute(t, &tweakH)
}

// forwardRound is R: add the tweakey, then (unless short) τ and M, then S.
func forwardRound(x, tk uint64, short bool, sb *[16]uint8) uint64 {
	x ^= tk
	if !short {
		x = mixColumns(permute(x, &cellTau))
	}
	return subCells(x, sb)
}

// backwardRound is R̄, the inverse of R: S⁻¹, then (unless short) M and
// τ⁻¹, then add the tweakey.
func backwardRound(x, tk uint64, short bool, isb *[16]uint8) uint64 {
	x = subCells(x, isb)
	if !short {
		x = invPermute(mixColumns(x), &cellTau)
	}
	return x ^ tk
}

// orthomorphism is o(w) = (w >>> 1) ⊕ (w >> 63), which derives w1 from w0.
func orthomorphism(w uint64) uint64 { return bits.RotateLeft64(w, -1) ^ w>>63 }

// QARMA64 encrypts plaintext with QARMA-64 as defined in the QARMA paper
// (Avanzi, ToSC 2017): tweak T, whitening key w0 and core key k0 (the
// 128-bit key is w0 || k0; w1 = o(w0), k1 = k0), S-box σ_sbox (0, 1 or 2)
// and rounds forward rounds (the paper's r; the cipher has 2r+2 rounds
// around the reflector). Valid rounds are 1 to 8.
//
// Arm's QARMA5 ComputePAC is QARMA64(data, modifier, key.Hi, key.Lo, 2, 5)
// and QARMA3 is QARMA64(data, modifier, key.Hi, key.Lo, 1, 3). This
// function is the slow, layer-by-layer reference; use ComputePAC for speed.
// It panics if sbox or rounds is out of range.
func QARMA64(plaintext, tweak, w0, k0 uint64, sbox, rounds int) uint64 {
	if sbox < 0 || sbox > 2 {
		panic(fmt.Sprintf("ptrauth: QARMA64 S-box σ%d does not exist (want 0, 1 or 2)", sbox))
	}
	if rounds < 1 || rounds > len(roundConst) {
		panic(fmt.Sprintf("ptrauth: QARMA64 with %d rounds (want 1 to %d)", rounds, len(roundConst)))
	}
	sb, isb := &sboxes[sbox], &invSboxes[sbox]
	w1, k1 := orthomorphism(w0), k0
	t := tweak
	x := plaintext ^ w0
	for i := range rounds {
		x = forwardRound(x, k0^t^roundConst[i], i == 0, sb)
		t = tweakForward(t)
	}
	// Central construction: a full forward round with w1, the
	// pseudo-reflector (τ, Q = M, ⊕k1, τ⁻¹), a full backward round with w0.
	x = forwardRound(x, w1^t, false, sb)
	x = invPermute(mixColumns(permute(x, &cellTau))^k1, &cellTau)
	x = backwardRound(x, w0^t, false, isb)
	for i := rounds - 1; i >= 0; i-- {
		t = tweakBackward(t)
		x = backwardRound(x, k0^t^roundConst[i]^alpha, i == 0, isb)
	}
	return x ^ w1
}
