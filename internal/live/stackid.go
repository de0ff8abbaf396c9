//go:build amd64 || arm64

package live

import (
	"math/bits"
	"runtime"
	"sync"
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/tracehash"
)

// Stack IDs in one pass (the engine of package unwind/live/stackid).
//
// What is stored, and deduplicated, is the physical chain of return
// addresses of the stack from the first frame that the skip keeps: one
// record word per frame-pointer record, at most IDs.MaxFrames of them.
// What a fetch gives back is what Callers would have returned for that
// stack: each physical frame expanded by its verdict (itself, its inlined
// calls, nothing for a hidden wrapper), as fastWalk expands it.
//
// The common case, skip 1 (the caller of the public Save), is one pass:
// walkHash walks the chain from the public Save's frame record, storing
// each return address and hashing it as it goes (the depot's hash,
// internal/tracehash, written out in the loop), and the depot's lookup
// with that hash compares the one candidate. A hit returns its handle: the
// record was checked when it was stored, and verdicts never change (an
// address returns into one function at one inline depth for the life of
// the program).
//
// Everything else is ResolveID's: a miss (a new stack), any other skip, a
// chain that breaks a rule or reaches the cgo boundary, race builds. It
// walks the chain again, looks up every frame's verdict in the cache
// (learning the stack first through Callers when one is missing), cuts
// the skip (which may fall inside a frame's inlined calls: the record's
// first word then says how many of its logical frames to drop), expands
// the record and compares the expansion with Callers' own answer for the
// stack. Only when they agree is the physical record stored; every frame
// of it that does not record just itself has its verdict pinned in the
// IDs first (the cache may evict it later; a fetch needs it for ever).
// When they do not agree, or a verdict cannot be had (runtime.sigpanic on
// the stack, a cgo callback, a broken chain, an address above 1<<48, the
// cache bypassed because the working set does not fit it, race builds),
// the record is Callers' answer itself, a logical record, marked in its
// first word: the same answer, deduplicated as logical pcs.
//
// idSlack is how many physical frames beyond MaxFrames ResolveID walks for a
// skip.
const idSlack = 64

// FastIDs reports whether the public Save takes the one-pass path (not in
// race builds, where Callers is runtime.Callers).
const FastIDs = !raceEnabled

// WalkHash is the public Save's one pass (stackid.Table.Save): it stores
// the return addresses of the records from fp on (start, the frame record
// of the public Save, or where SkipIDFrames arrived from it) into rec until
// rec is full or the chain ends, hashing each one as it stores it
// (tracehash.Step, written out: the loop calls nothing, even at -N -l),
// and returns the count and the running hash. The first word carries cut,
// the logical frames to drop from the first frame's expansion. ok is false
// if the walk stopped at a record that broke a rule or at the known cgo
// boundary, or if the first address does not fit below the record's tags:
// then only ResolveID can say what to store.
//
//go:norace
//go:nocheckptr
func WalkHash(start, fp unsafe.Pointer, cut int, rec []uint64, seed, mul uint64) (n int, h uint64, ok bool) {
	if len(rec) == 0 {
		return 0, 0, false
	}
	stop := stopPC.Load()
	limit := min(uintptr(start), ^uintptr(0)-maxStack) + maxStack // limitFor(start), clamped
	h = seed
	// The first record, with the cut in its word (the loop's body, peeled).
	ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
	next := *(*unsafe.Pointer)(fp)
	w0 := uint64(ret) | uint64(cut)<<addrBits
	rec[0] = w0
	t := w0 * mul
	h = bits.RotateLeft64(h, tracehash.Rot) ^ t ^ t>>tracehash.Fold
	ok = ret < addrMask && ret != stop
	if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 || ret == stop {
		return 1, h, ok && u == 0
	}
	fp = next
	for n := 1; n < len(rec); n++ {
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		next := *(*unsafe.Pointer)(fp)
		rec[n] = uint64(ret)
		t := uint64(ret) * mul
		h = bits.RotateLeft64(h, tracehash.Rot) ^ t ^ t>>tracehash.Fold
		if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 || ret == stop {
			return n + 1, h, ok && u == 0 && ret != stop
		}
		fp = next
	}
	return len(rec), h, ok
}

// SkipIDFrames drops skip-1 logical frames of the walk from start (the
// frame record of the public Save, whose own logical frame is skip 0) by
// the verdicts of the cache, as Callers drops them, and returns the record
// of the first frame kept and the logical frames to drop from its
// expansion (cut). ok is false if a verdict is missing or slow, a record
// breaks a rule, or the skip passes maxFastSkip frames: then only
// ResolveID can say what to store.
//
//go:norace
//go:nocheckptr
func SkipIDFrames(start unsafe.Pointer, skip int) (fp unsafe.Pointer, cut int, ok bool) {
	fp = start
	rem := skip - 1
	for steps := 0; rem > 0; steps++ {
		if steps > maxFastSkip {
			return nil, 0, false
		}
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		if hw := homeTab[homeHash(ret)].Load(); hw == ret {
			rem--
		} else if pcs := homeExpansion(ret, hw); pcs != nil {
			// A frame with inlined calls, named by its home slot.
			if len(pcs) > rem {
				return fp, rem, true
			}
			rem -= len(pcs)
		} else {
			// lookup is a call, which may move the stack: fp is adjusted
			// with it (an unsafe.Pointer), and the bound is computed from
			// start afresh below.
			k, pcs, found := lookup(ret)
			switch {
			case !found || k == kindSlow || !cacheable(ret):
				return nil, 0, false
			case k == kindSelf:
				rem--
			case len(pcs) <= rem:
				rem -= len(pcs)
			default:
				return fp, rem, true
			}
		}
		limit := limitFor(start)
		nfp := *(*uintptr)(fp)
		if nfp <= uintptr(fp) || nfp >= limit || nfp&(ptrSize-1) != 0 {
			return nil, 0, false
		}
		fp = *(*unsafe.Pointer)(fp) // the word just checked, reloaded as a pointer
	}
	return fp, 0, true
}

// idScratch is ResolveID's reusable memory.
type idScratch struct {
	rec     [maxIDFrames]uint64
	phys    []uintptr
	verdict []verdict
	logical []uintptr
	exp     []uintptr
}

var idScratches = sync.Pool{New: func() any { return new(idScratch) }}

// ResolveID is the public Save's general case (see the top of this file):
// the handle of the stack above start, the frame record of the public
// Save, which is logical frame 0 of skip (1 is its caller), as Callers
// counts. It must be called directly by that function, which must not be
// inlined.
//
//go:noinline
func ResolveID(start unsafe.Pointer, skip int, ids *IDs) (uint32, error) {
	idResolves.Add(1)
	s := idScratches.Get().(*idScratch)
	defer idScratches.Put(s)
	buf := &s.rec
	m := ids.MaxFrames
	if skip < 0 {
		skip = 0
	}
	// Callers' answer, from the frame of the public Save: frame 0 is
	// ResolveID, 1 the public Save (neither inlined).
	want := 4 * m
	if cap(s.logical) < want+1 {
		s.logical = make([]uintptr, want+1)
	}
	logical := s.logical[:want+1]
	if raceEnabled && !ids.walkInRace {
		// Callers is runtime.Callers here: frame 0 is runtime.Callers,
		// then ResolveID, the public Save.
		nl := runtime.Callers(clampSkip(skip)+2, logical)
		return ids.storeLogical(buf, logical[:nl])
	}
	nl := idCallers(clampSkip(skip)+1, logical)
	if skip == 0 || skip > maxSkip {
		return ids.storeLogical(buf, logical[:nl])
	}
	// The physical chain again, from the same record. A rule broken, or
	// the boundary, beyond the frames stored does not matter: Callers'
	// answer is compared only as far as they go.
	if cap(s.phys) < m+idSlack {
		s.phys = make([]uintptr, m+idSlack)
	}
	np, why, _ := rawWalk(start, start, s.phys[:m+idSlack], stopPC.Load())
	phys := s.phys[:np]
	// Verdicts, from the cache (Callers has just learned the stack, unless
	// the cache is bypassed or thrashing), as far as they are needed.
	s.verdict = s.verdict[:0]
	verdictOf := func(i int) (verdict, bool) {
		for len(s.verdict) <= i {
			r := phys[len(s.verdict)]
			if !cacheable(r) {
				return verdict{}, false
			}
			k, pcs, ok := lookup(r)
			if !ok || k == kindSlow {
				return verdict{}, false
			}
			s.verdict = append(s.verdict, verdict{self: k == kindSelf, pcs: pcs})
		}
		return s.verdict[i], true
	}
	// The skip: skip-1 logical frames of the walk (frame 0, the public
	// Save itself, is not in it).
	rem, p0, cut := skip-1, 0, 0
	for rem > 0 && p0 < len(phys) {
		v, ok := verdictOf(p0)
		switch {
		case !ok:
			return ids.storeLogical(buf, logical[:nl])
		case v.self:
			rem--
			p0++
		case len(v.pcs) <= rem:
			rem -= len(v.pcs)
			p0++
		default:
			cut, rem = rem, 0
		}
	}
	if rem > 0 || p0 == len(phys) || cut > tagCutMask {
		return ids.storeLogical(buf, logical[:nl])
	}
	end := min(len(phys), p0+m)
	if end < p0+m && why == rawFull {
		// The skip took frames the walk needed.
		return ids.storeLogical(buf, logical[:nl])
	}
	if _, ok := verdictOf(end - 1); !ok {
		return ids.storeLogical(buf, logical[:nl])
	}
	ended := why == rawEnd && end == len(phys)
	// The expansion, compared with Callers' answer.
	exp := s.exp[:0]
	for i := p0; i < end; i++ {
		v := s.verdict[i]
		switch {
		case v.self:
			exp = append(exp, phys[i])
		case i == p0:
			exp = append(exp, v.pcs[cut:]...)
		default:
			exp = append(exp, v.pcs...)
		}
	}
	s.exp = exp
	if nl < len(exp) || ended && nl != len(exp) || !equalPCs(logical[:len(exp)], exp) {
		return ids.storeLogical(buf, logical[:nl])
	}
	rec := buf[:end-p0]
	for i := range rec {
		rec[i] = uint64(phys[p0+i])
	}
	rec[0] |= uint64(cut) << addrBits
	ids.pin(phys[p0:end], s.verdict[p0:end])
	return ids.Store(rec, tracehash.Sum(rec, ids.Seed, ids.Mul))
}
