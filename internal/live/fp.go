//go:build amd64 || arm64

package live

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Supported reports whether this GOARCH keeps frame pointers, so that
// CallersFP works and Callers uses the frame-pointer walk.
const Supported = true

// getfp returns its caller's frame pointer. It is implemented in assembly
// (getfp_$GOARCH.s) and called directly with ABI0, without a wrapper frame.
func getfp() unsafe.Pointer

// CallersFP stores in pc the physical return addresses of the calling
// goroutine's frame-record chain, starting with the frame that called
// CallersFP, after dropping the first skip of them. It returns the number
// stored. Inlined calls are not expanded (runtime.CallersFrames expands them)
// and wrapper frames are not hidden. The walk ends at the goroutine's entry
// frame or, in a cgo callback, at the frame that returns into
// runtime.cgocallback (the last pc stored). A walk stopped by a broken frame
// record returns the frames found so far and a *errs.CorruptError.
//
// The common case (skip up to maxFastSkip, no cgo boundary learned yet, a
// healthy chain) runs skipFP's and FPLoop's loops inlined, with nothing
// before them but getfp and three tests; everything else, and a walk that
// stops at a record that broke a rule (which needs the error, or the
// boundary check), is walkFP's from the same first record.
//
//go:noinline
//go:norace
//go:nocheckptr
func CallersFP(skip int, pc []uintptr) (int, error) {
	start := getfp()
	if uint(skip) <= maxFastSkip && len(pc) != 0 && stopPC.Load() == 0 {
		fp := start
		if skip != 0 {
			fp = skipFP(start, skip) // inlined: no call of its own
		}
		if fp != nil {
			if n, ok := FPLoop(start, fp, pc); ok { // inlined
				return n, nil
			}
		}
	}
	return walkFP(start, skip, pc)
}

// maxFastSkip is the largest skip CallersFP drops in its inlined loop.
const maxFastSkip = 16

// maxSkip is the largest skip Callers walks for; a larger one is answered
// by runtime.Callers.
const maxSkip = 1 << 12

// walkProbe is rawWalk from start that also probes the home slot of each
// return address after the first on the way: the common case of Callers
// in one small leaf loop that runs from registers. The probes do not feed
// the walk's chain of loads, so they run in its shadow. miss is 0 when
// every frame stored after the first records itself; at the first frame
// that does not (a miss, which is also every frame that returns into the
// known boundary stop: its verdict is kindSlow), the walk stops early and
// returns as if pc were full (rawFull, fp the next record, which passed
// the rules), with miss set, or with the reason the chain ends there: Callers
// goes on from there with fastWalk and rawWalk. So the loop needs neither
// a compare with stop nor a register for the verdict. The first frame,
// the one that called Callers, is left to Callers (and expandFirst):
// through the public wrapper, inlined into its caller, it is the frame
// whose expansion the skip cuts.
//
//go:norace
//go:nocheckptr
func walkProbe(start unsafe.Pointer, pc []uintptr, stop uintptr) (m, why int, fp unsafe.Pointer, miss uintptr) {
	limit := uintptr(start) + maxStack // limitFor(start), written out: no call
	if limit < uintptr(start) {
		limit = ^uintptr(0)
	}
	fp = start
	if len(pc) == 0 {
		return 0, rawFull, fp, 0
	}
	// The first record, without a probe (the loop's body, peeled).
	ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
	next := *(*unsafe.Pointer)(fp)
	pc[0] = ret
	if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 || ret == stop {
		return 1, rawEndWhy(u, ret, stop), fp, 0
	}
	fp = next
	for n := 1; n < len(pc); n++ {
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		next := *(*unsafe.Pointer)(fp)
		pc[n] = ret
		// homeHash(ret), written out: no call in this loop, even at -N -l.
		w := atomic.LoadUintptr((*uintptr)(unsafe.Pointer(&homeTab[(uint64(ret)*hashMul)>>hashShift])))
		if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 || w != ret {
			if w != ret {
				miss = 1
				if u := uintptr(next); ret != stop && u > uintptr(fp) && u < limit && u&(ptrSize-1) == 0 {
					return n + 1, rawFull, next, miss // stop early, at a record that passed
				}
			}
			return n + 1, rawEndWhy(u, ret, stop), fp, miss
		}
		fp = next
	}
	return len(pc), rawFull, fp, 0
}

// expandFirst finishes Callers' common case when the first frame, the one
// that called Callers, does not simply record itself: walkProbe stored m
// return addresses in pc, every one after the first recording itself, and
// stopped at the end of the chain or with pc full. It expands the first
// frame from its home slot, drops skip of its logical frames and returns
// the count, or -1 if it cannot (a miss, a verdict outside the home slot, a
// skip beyond the frame), for fastWalk.
//
// It is the public live.Callers' path: that wrapper is inlined into its
// caller, so the first physical frame records [the wrapper's logical frame,
// the caller's], both from one return address (runtime.Callers stores the
// return address for the innermost and the inline mark's pc plus one for
// the caller, and so does the cache); the public skip 1 (the caller) is
// skip 1 here and drops the wrapper's, and the answer is the caller's pc
// followed by the raw return addresses. A caller that is itself inlined
// shifts them up (pc's last ones are dropped when pc is full).
func expandFirst(pc []uintptr, m, skip int) int {
	r := pc[0]
	w := homeTab[homeHash(r)].Load()
	if w&addrMask != r || wordKind(w) != kindMany {
		return -1
	}
	e := manyTab[wordIndex(w)].Load()
	if e == nil || e.ret != r || skip >= len(e.pcs) {
		return -1
	}
	s := len(e.pcs) - 1 - skip // logical pcs added before pc[1:m]
	if s == 0 {
		pc[0] = e.pcs[skip]
		if d := int64(e.pcs[1] - r); skip == 1 && d == int64(int16(d)) {
			// The public Callers(1)'s common case: answered by
			// firstTab from now on.
			firstTab[firstHash(r)].CompareAndSwap(0, r|uintptr(uint16(d))<<addrBits)
		}
		return m
	}
	n := min(m+s, len(pc))
	if 1+s < n {
		copy(pc[1+s:n], pc[1:])
	}
	copy(pc[:n], e.pcs[skip:])
	return n
}

// rawEndWhy says why a raw walk stopped at a record with saved frame
// pointer u and return address ret, given the known boundary stop.
func rawEndWhy(u, ret, stop uintptr) int {
	switch {
	case ret == stop:
		return rawStop
	case u == 0:
		return rawEnd
	}
	return rawBad
}

// callersSlow is Callers without the frame-pointer walk; tests use it to
// check the fallback's skip arithmetic.
//
//go:noinline
func callersSlow(skip int, pc []uintptr) int {
	if skip < 0 {
		skip = 0
	}
	return runtime.Callers(clampSkip(skip)+2, pc)
}

// Walk results.
const (
	walkDone = iota // pc holds the answer
	walkMiss        // a return address is not in the cache
	walkSlow        // the stack needs runtime.Callers
)

// fastChunk is how many return addresses fastWalk reads ahead into a
// buffer of its own once pc has no room to expand frames in place.
const fastChunk = 32

// fastWalk answers Callers from the cache after Callers' raw walk stored
// m return addresses in pc and stopped for why at the record fp (the next
// one, for rawFull). A pass of cache probes turns them into logical pcs in
// place: a frame that records itself (most frames) costs one compare with
// its home slot, and so does finding a frame with inlined calls whose
// expansion the home slot names. Hidden frames and skipped frames leave
// room. The first expansion that would overwrite return addresses not
// read yet moves them (at most fastChunk; the records after those are
// walked again) into a buffer of fastWalk's own; the walk after pc[:m]
// goes into that buffer, fastChunk records at a time, and is expanded
// from there into pc. So every address is moved at most once, whatever
// the number of expansions (moving the unread addresses up at each one,
// as fastWalk did, cost a copy of the rest of pc per expansion: 23% of a
// whole stack of 100 frames).
func fastWalk(start, fp unsafe.Pointer, skip int, pc []uintptr, m, why int) (int, int) {
	return fastWalkAt(start, fp, skip, pc, 0, m, why)
}

// fastWalkAt is fastWalk (w 0) or, with w == m, its continuation: pc[:w]
// already answered, nothing left to read in pc, fp the record to go on
// from (which passed the rules).
func fastWalkAt(start, fp unsafe.Pointer, skip int, pc []uintptr, w, m, why int) (int, int) {
	var chunk [fastChunk]uintptr
	src := pc[:m]   // the return addresses to read: src[r:]
	inPlace := true // src is pc[:m], from start: a store at w must not pass r
	r := w          // w: logical pcs stored in pc[:w]
	for {
		for r < len(src) {
			if skip == 0 {
				// The common case: frames that record themselves.
				if !inPlace {
					for r < len(src) && w < len(pc) && homeTab[homeHash(src[r])].Load() == src[r] {
						pc[w] = src[r]
						r, w = r+1, w+1
					}
					if w == len(pc) {
						return w, walkDone
					}
				} else if w == r {
					for r < len(src) && homeTab[homeHash(src[r])].Load() == src[r] {
						r++
					}
					w = r
				}
				if r == len(src) {
					break
				}
			}
			ret := src[r]
			k, pcs := kindSelf, []uintptr(nil)
			if hw := homeTab[homeHash(ret)].Load(); hw != ret {
				if pcs = homeExpansion(ret, hw); pcs != nil {
					k = kindMany
				} else {
					var ok bool
					if k, pcs, ok = lookup(ret); !ok {
						if !cacheable(ret) {
							return w, walkSlow
						}
						return w, walkMiss
					}
				}
			}
			r++
			switch k {
			case kindSelf:
				if skip > 0 {
					skip--
					continue
				}
				pc[w] = ret
				w++
			case kindHidden:
			case kindMany:
				if skip >= len(pcs) {
					skip -= len(pcs)
					continue
				}
				pcs = pcs[skip:]
				skip = 0
				if inPlace && w+len(pcs) > r && r < len(src) {
					// No room in place: read on from chunk.
					n := copy(chunk[:], src[r:])
					if n < len(src)-r {
						// src[i] is record i from start.
						fp, why = skipRecords(start, r+n), rawFull
					}
					src, r, inPlace = chunk[:n], 0, false
				}
				if len(pcs) <= len(pc)-w && len(pcs) <= 4 {
					// Most expansions are a call or two: stored here,
					// not by a call of memmove.
					for _, p := range pcs {
						pc[w] = p
						w++
					}
				} else {
					w += copy(pc[w:], pcs)
				}
				if w == len(pc) {
					return w, walkDone
				}
			default:
				return w, walkSlow
			}
		}
		if w == len(pc) {
			return w, walkDone
		}
		switch why {
		case rawFull:
		case rawEnd:
			return w, walkDone
		default:
			return w, walkSlow
		}
		if skip == 0 {
			// The rest, walked and expanded into pc in one loop, as far
			// as the home slots answer.
			var held bool
			if w, why, fp, held = walkExpand(start, fp, pc, w); !held {
				src, r, inPlace = nil, 0, false
				continue
			}
			// fp is a record whose verdict is not in its home slot: it
			// and the ones after it go through chunk.
		}
		var n int
		n, why, fp = rawWalk(start, fp, chunk[:min(fastChunk, len(pc)-w)], stopPC.Load())
		src, r, inPlace = chunk[:n], 0, false
	}
}

// homeExpansion returns the expansion of ret if hw, its home slot's word,
// is ret's kindMany word and its manyTab entry is still ret's; else nil.
func homeExpansion(ret, hw uintptr) []uintptr {
	if hw&addrMask != ret || wordKind(hw) != kindMany {
		return nil
	}
	return expansionOf(ret, hw)
}

// expandWalk is Callers when walkProbe met a frame after the first that
// does not record just itself (a frame with inlined calls, most often):
// it drops the skip by the cache's verdicts (SkipIDFrames), stores the
// expansion of the first frame kept less the logical frames the skip
// takes of it, and walks and expands the rest in walkExpand's loop,
// leaving to fastWalk only a record whose verdict its home slot does not
// hold. ok is false, with pc untouched, when the skip cannot be dropped
// that way (a verdict missing or slow, a broken record, a skip beyond
// maxFastSkip frames): fastWalk answers from walkProbe's walk then.
func expandWalk(start unsafe.Pointer, skip int, pc []uintptr) (n, st int, ok bool) {
	fp, cut, ok := SkipIDFrames(start, skip+1)
	if !ok {
		return 0, 0, false
	}
	w := 0
	if cut > 0 {
		// The skip ends inside this frame's expansion.
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		pcs := homeExpansion(ret, homeTab[homeHash(ret)].Load())
		if pcs == nil {
			k, many, found := lookup(ret) // a call: fp moves with the stack
			if !found || k != kindMany {
				return 0, 0, false
			}
			pcs = many
		}
		w = copy(pc, pcs[cut:])
		if w == len(pc) {
			return w, walkDone, true
		}
		limit := limitFor(start)
		next := *(*uintptr)(fp)
		switch {
		case next == 0:
			return w, walkDone, true
		case next <= uintptr(fp) || next >= limit || next&(ptrSize-1) != 0:
			return w, walkSlow, true
		}
		fp = *(*unsafe.Pointer)(fp) // the word just checked, as a pointer
	}
	w, why, fp, held := walkExpand(start, fp, pc, w)
	if held {
		n, st = fastWalkAt(start, fp, 0, pc, w, w, rawFull)
		return n, st, true
	}
	if w == len(pc) || why == rawFull || why == rawEnd {
		// A full pc is the answer, as in fastWalk, whatever the record
		// after the last one stored.
		return w, walkDone, true
	}
	return w, walkSlow, true
}

// walkExpand loads a manyTab entry as the unsafe.Pointer it holds: an
// atomic.Pointer is that word and nothing else (both bounds fail to
// compile otherwise).
var (
	_ [unsafe.Sizeof(atomic.Pointer[manyEntry]{}) - unsafe.Sizeof(unsafe.Pointer(nil))]struct{}
	_ [unsafe.Sizeof(unsafe.Pointer(nil)) - unsafe.Sizeof(atomic.Pointer[manyEntry]{})]struct{}
)

// walkExpand walks the chain from the record fp (which passed the rules)
// and stores the logical pcs of each record into pc[w:] as the record's
// home slot gives them: the return address itself, nothing (a hidden
// wrapper), or the expansion the slot names in manyTab. It stops when pc
// is full (rawFull, fp the next record, or the record whose expansion did
// not fit, stored as far as it fits), at the end of the chain (rawEnd),
// at a record whose next one breaks a rule (rawBad), or, with held set,
// before a record whose verdict its home slot does not hold (fp that
// record, not stored: lookup must find it, and the known boundary is
// never in a home slot). The loop calls nothing, so the stack cannot
// move under it.
//
//go:norace
//go:nocheckptr
func walkExpand(start, fp unsafe.Pointer, pc []uintptr, w int) (int, int, unsafe.Pointer, bool) {
	limit := uintptr(start) + maxStack // limitFor(start), written out: no call
	if limit < uintptr(start) {
		limit = ^uintptr(0)
	}
	for w < len(pc) {
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		// homeHash, wordKind, wordIndex and manyTab's Load written out:
		// no call in this loop, even at -N -l.
		hw := atomic.LoadUintptr((*uintptr)(unsafe.Pointer(&homeTab[(uint64(ret)*hashMul)>>hashShift])))
		switch k := kind(hw >> kindShift); {
		case hw == ret:
			pc[w] = ret
			w++
		case hw&addrMask != ret:
			return w, rawFull, fp, true
		case k == kindMany:
			e := (*manyEntry)(atomic.LoadPointer((*unsafe.Pointer)(unsafe.Pointer(&manyTab[uint32(hw>>addrBits)&indexMask]))))
			if e == nil || e.ret != ret {
				return w, rawFull, fp, true
			}
			if len(e.pcs) == len(e.pair) && w+len(e.pair) <= len(pc) {
				pc[w], pc[w+1] = e.pair[0], e.pair[1]
				w += len(e.pair)
				break
			}
			for _, p := range e.pcs {
				if w == len(pc) {
					return w, rawFull, fp, false
				}
				pc[w] = p
				w++
			}
		case k != kindHidden:
			return w, rawFull, fp, true
		}
		next := *(*unsafe.Pointer)(fp)
		if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 {
			if u == 0 {
				return w, rawEnd, fp, false
			}
			return w, rawBad, fp, false
		}
		fp = next
	}
	return w, rawFull, fp, false
}
