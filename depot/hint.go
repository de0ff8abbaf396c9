package depot

import (
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/depotview"
)

// Hints let a plain save (Save, SaveFlags, SavePCs) find a trace it holds
// without hashing it. A save has the whole trace in hand, so before it
// hashes every frame it samples some (the first hintHead, the middle one
// and the last two) and the length; their key picks a set of hint slots,
// each naming the persistent record of a trace saved before whose key
// picks that set. The save compares the trace with the record whose slot has its
// tag (the one compare a hit makes anyway) and, if they are equal,
// returns its handle: no hash of the trace and no probe of the table.
// Otherwise it goes on as before: the hash, the lookup, the store.
//
// A slot is one word, written and read atomically: the record's handle,
// its frame count and a tag of the key, so a slot is a whole hint or none.
// Only persistent records go in: they are never evicted, so the frames of
// a handle in a slot never change, and a hint needs no check of the
// record's state. A hint is only ever a guess that the compare confirms:
// a wrong one costs the tag checks, or one compare up to the first frame
// that differs, and the save goes on as without hints.
//
// A set is hintWays slots (32 bytes, in one cache line). A save that
// found its record without a hint writes a slot of its set: the slot of
// its own tag if there is one (a trace with the same key: the same
// sampled frames, others between them), else an empty one, else one the
// roll chooses; a slot that is not empty only one time in hintReplaceOdds
// (a depotview.Rolls chance). So a set holds at most one slot of a tag
// (bar two saves writing one set at once) and a save compares at most one
// record by its hint, however many traces share its key; and traces
// saved in turn that share a set write it about one save in
// hintReplaceOdds rather than on every save, each keeping its slot for a
// few saves at a time. Traces that differ only where the key does not
// look (deep in a recursion) share a key, and so one slot: each save of
// one of them compares at most one other record, and the hash and the
// lookup find its own. With hintSlots 8,192 (64 KiB) and 4,096 distinct
// traces saved in turn, a model of the table finds 95% of them by their
// hint (a direct-mapped table of the same size 76%, of 4,096 slots 58%).
const (
	hintHead        = 12
	hintWays        = 4
	hintSetBits     = 11
	hintSlots       = hintWays << hintSetBits
	hintNShift      = 32
	hintTagShift    = hintNShift + sizeBits
	hintTagBits     = 64 - hintTagShift
	hintReplaceOdds = 4
)

// A hint slot's frame count fits its field.
const _ uint = 1<<sizeBits - 1 - MaxFramesLimit

// hintBytes is what a depot's hints take (Stats.HintBytes).
const hintBytes = int64(unsafe.Sizeof(hints{}))

// hints is a depot's hint table and the counters of its chances.
type hints struct {
	slots [hintSlots]atomic.Uint64
	rolls depotview.Rolls
}

// hintKey returns the key of trace w (not empty) under the depot's seed:
// w's length, its first hintHead frames, its middle and its last two
// frames, each rotated by its own amount, then multiplied (the set and
// the tag are the product's high bits). Return addresses differ in their
// low bits; the rotations put those bits of each sample in other places,
// so traces that differ in one sampled frame never share a key and
// traces that differ in two seldom do.
func hintKey(w []uint64, seed uint64) uint64 {
	n := len(w)
	k := seed ^ uint64(n)<<55 ^ bits.RotateLeft64(w[n/2], 20) ^ bits.RotateLeft64(w[n-1], 44) ^
		bits.RotateLeft64(w[max(n-2, 0)], 50)
	if n >= hintHead {
		// A tree of xors, not a chain: what comes next waits for k.
		h := (*[hintHead]uint64)(w)
		k ^= (h[0] ^ bits.RotateLeft64(h[1], 5) ^ (bits.RotateLeft64(h[2], 10) ^ bits.RotateLeft64(h[3], 15))) ^
			(bits.RotateLeft64(h[4], 21) ^ bits.RotateLeft64(h[5], 26) ^ (bits.RotateLeft64(h[6], 31) ^ bits.RotateLeft64(h[7], 37))) ^
			(bits.RotateLeft64(h[8], 42) ^ bits.RotateLeft64(h[9], 47) ^ (bits.RotateLeft64(h[10], 53) ^ bits.RotateLeft64(h[11], 58)))
	} else {
		for i, f := range w {
			k ^= bits.RotateLeft64(f, 5*i)
		}
	}
	return k * 0x9e3779b97f4a7c15
}

// hintSet returns the first slot of the set of key k and the tag (a hint
// word's bits from hintNShift on: tag and frame count) of an n-frame
// trace with key k.
func hintSet(k uint64, n int) (set uint64, tag uint64) {
	return k >> (64 - hintSetBits) * hintWays, k>>(64-hintSetBits-hintTagBits)&(1<<hintTagBits-1)<<sizeBits | uint64(n)
}

// hinted returns the handle of the record the hint of key k names, if it
// holds trace.
func (d *Depot) hinted(trace []uint64, k uint64) (Handle, bool) {
	hs := d.hints.Load()
	if hs == nil {
		return 0, false
	}
	set, tag := hintSet(k, len(trace))
	ways := (*[hintWays]atomic.Uint64)(hs.slots[set : set+hintWays])
	for i := range ways {
		e := ways[i].Load()
		if e>>hintNShift != tag {
			continue
		}
		// The one slot of the tag: another trace with the key, or this
		// one.
		p, off := d.at(uint32(e) & (1<<d.locBits - 1))
		if p == nil || !equalFrames(p[off+hdrWords:], trace) {
			return 0, false
		}
		if d.countHits {
			d.countHit(unsafe.Pointer(&k))
		}
		return Handle(e), true
	}
	return 0, false
}

// learn makes a slot of the set of key k name h, the persistent record of
// an n-frame trace (see the hint constants): the slot of its tag, or else
// an empty one, or else the one the roll chooses; one that is not empty
// one time in hintReplaceOdds. The depot's first learn allocates its
// hints, so a depot only ever saved with a producer's hash has none.
func (d *Depot) learn(k uint64, h Handle, n int) {
	hs := d.hints.Load()
	if hs == nil {
		d.hints.CompareAndSwap(nil, new(hints)) // or another save's are in
		hs = d.hints.Load()
	}
	set, tag := hintSet(k, n)
	e := tag<<hintNShift | uint64(h)
	ways := (*[hintWays]atomic.Uint64)(hs.slots[set : set+hintWays])
	empty := -1
	for i := range ways {
		switch old := ways[i].Load(); {
		case old == e:
			return
		case old>>hintNShift == tag:
			if hs.rolls.Roll()%hintReplaceOdds == 0 {
				ways[i].Store(e)
			}
			return
		case old == 0 && empty < 0:
			empty = i
		}
	}
	if empty >= 0 {
		ways[empty].Store(e)
	} else if r := hs.rolls.Roll(); r%hintReplaceOdds == 0 {
		ways[r/hintReplaceOdds%hintWays].Store(e)
	}
}
