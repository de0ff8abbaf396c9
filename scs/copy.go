package scs

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/ptrauth"
)

// copyStrip is saveChecked's copy loop (save's is its own): dst[j] is the stripped src[len(src)-1-j],
// newest first; len(dst) >= len(src). Each slot is read once, atomically
// (READ_ONCE), and stripped with m. It takes four slots per step; when all four
// are in one half (bit 55 all set: kernel addresses, or all clear: user
// addresses) the strip of each is setting, or clearing, that half's
// field ([ptrauth.Masks.Field]), one operation; otherwise it is [ptrauth.Masks.Strip], inlined.
// It is out of line so that save's registers do not spill in its loop.
//
//go:noinline
func copyStrip(dst, src []uint64, m ptrauth.Masks) {
	m0, m1 := m.Field(false), m.Field(true)
	dst = dst[:len(src)]
	for len(src) >= 4 {
		k := len(src)
		w := src[k-4 : k]
		a, b, c, e := atomic.LoadUint64(&w[3]), atomic.LoadUint64(&w[2]), atomic.LoadUint64(&w[1]), atomic.LoadUint64(&w[0])
		switch {
		case a&b&c&e&(1<<55) != 0:
			a, b, c, e = a|m1, b|m1, c|m1, e|m1
		case (a|b|c|e)&(1<<55) == 0:
			a, b, c, e = a&^m0, b&^m0, c&^m0, e&^m0
		default:
			a, b, c, e = m.Strip(a), m.Strip(b), m.Strip(c), m.Strip(e)
		}
		o := dst[:4]
		o[0], o[1], o[2], o[3] = a, b, c, e
		dst, src = dst[4:], src[:k-4]
	}
	if k := len(src); k >= 2 {
		a, b := atomic.LoadUint64(&src[k-1]), atomic.LoadUint64(&src[k-2])
		o := dst[:2]
		o[0], o[1] = m.Strip(a), m.Strip(b)
		dst, src = dst[2:], src[:k-2]
	}
	if len(src) == 1 && len(dst) >= 1 {
		dst[0] = m.Strip(atomic.LoadUint64(&src[0]))
	}
}

// stripHalf is [ptrauth.Masks.Strip] of a with the fields of both halves,
// m0 = m.Field(false) and m1 = m.Field(true): bit 55 selects setting m1
// or clearing m0, which compiles to a conditional move.
func stripHalf(a, m0, m1 uint64) uint64 {
	x := a &^ m0
	if a&(1<<55) != 0 {
		x = a | m1
	}
	return x
}

// copyStripBytes is copyStrip over caller memory: dst[j] is
// the stripped slot len(src)/8-1-j; src holds the slots
// little-endian, len(src) a multiple of 8; nothing writes it, so plain
// loads do.
//
//go:noinline
func copyStripBytes(dst []uint64, src []byte, m ptrauth.Masks) {
	m0, m1 := m.Field(false), m.Field(true)
	le := binary.LittleEndian
	dst = dst[:len(src)/8]
	for len(src) >= 32 {
		k := len(src)
		s := src[k-32 : k]
		a, b, c, e := le.Uint64(s[24:]), le.Uint64(s[16:]), le.Uint64(s[8:]), le.Uint64(s[0:])
		switch {
		case a&b&c&e&(1<<55) != 0:
			a, b, c, e = a|m1, b|m1, c|m1, e|m1
		case (a|b|c|e)&(1<<55) == 0:
			a, b, c, e = a&^m0, b&^m0, c&^m0, e&^m0
		default:
			a, b, c, e = m.Strip(a), m.Strip(b), m.Strip(c), m.Strip(e)
		}
		o := dst[:4]
		o[0], o[1], o[2], o[3] = a, b, c, e
		dst, src = dst[4:], src[:k-32]
	}
	for len(src) >= 8 && len(dst) >= 1 {
		k := len(src)
		dst[0] = m.Strip(le.Uint64(src[k-8:]))
		dst, src = dst[1:], src[:k-8]
	}
}
