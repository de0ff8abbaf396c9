// Package depotview lets the project's one-pass stack IDs read a depot's
// persistent records where they lie, without a call per read: package
// depot describes where a record's frames are for a handle, and
// internal/live, guessing a stack's record before it walks the stack,
// compares each return address with the guess's frame as it reads it.
//
// A persistent record is never evicted and its pool is never freed, so the
// frames a handle of one name the same words for the life of the depot;
// only such handles may be looked up through a Layout.
package depotview

import (
	"sync/atomic"
	"unsafe"
)

// Layout is where one depot keeps its records.
type Layout struct {
	// Pools is the depot's table of pool pointers (each one word, nil
	// until its pool is allocated).
	Pools unsafe.Pointer
	// A handle's low PoolBits bits (PoolMask) choose its pool; the bits
	// above them, masked by UnitMask, are its record's offset in the
	// pool, in units of UnitBytes. (Of sets PoolBits below 32.)
	PoolBits           uint
	PoolMask, UnitMask uintptr
	UnitBytes          uintptr
	// FramesOffset is the bytes from a record's start to its first frame.
	FramesOffset uintptr
	// Hits, if not nil, is the depot's hit counters: 1<<HitShardBits
	// uint64s, HitStride bytes apart (see CountHit).
	Hits         unsafe.Pointer
	HitShardBits uint
	HitStride    uintptr
}

// Of returns the Layout of d, a *depot.Depot set up by depot.New. It is
// set by package depot when it is initialised.
var Of func(d any) Layout

// Frames returns the address of the first frame of the persistent record
// named by handle h.
func (l *Layout) Frames(h uint32) unsafe.Pointer {
	// The shift masked to 5 bits: no test for a count past the word.
	idx := uintptr(h) & l.PoolMask
	unit := uintptr(h) >> (l.PoolBits & 31) & l.UnitMask
	p := *(*unsafe.Pointer)(unsafe.Add(l.Pools, idx*unsafe.Sizeof(uintptr(0))))
	return unsafe.Add(p, unit*l.UnitBytes+l.FramesOffset)
}

// CountHit counts a hit in the depot's statistics, as the depot counts its
// own: in the shard of sp, the address of a variable on the caller's
// stack.
func (l *Layout) CountHit(sp uintptr) {
	if l.Hits != nil {
		atomic.AddUint64((*uint64)(unsafe.Add(l.Hits, Shard(sp, l.HitShardBits)*l.HitStride)), 1)
	}
}

// Shard picks the hit-counter shard (of 1<<bits, bits from 1 to 63) of
// the goroutine whose stack holds the address sp. A shard must stay with
// its goroutine: a shard picked per save (by the trace's hash) is written
// by every goroutine in turn, so its cache line moves between the cores
// on about every other hit, which cost 5 to 30 ns a hit on two
// goroutines.
// Goroutine stacks are disjoint (2 KiB apart at the least), so two
// goroutines counting at once share a shard with probability 1>>bits, as
// two CPUs never share a per-CPU counter in the kernel. A stack that moves
// (grows) takes another shard, which is harmless.
func Shard(sp uintptr, bits uint) uintptr {
	return uintptr(uint64(sp>>10) * 0x9e3779b97f4a7c15 >> ((64 - bits) & 63))
}
