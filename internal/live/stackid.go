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
// The common case, a stack seen again and again, is one pass: Hit walks
// the chain from the public Save's frame record (or where the skip
// arrived), reading its first hintFrames return addresses; their key
// (hintKey) picks a hint, the record of a stack seen before that began
// the same way, and the walk compares each further return address with
// the hint's frame as it reads it. If they agree to the end, the hint is
// the stack's record: a hit with no hash and no lookup. Otherwise
// WalkFirst walks the first frames again, hashing them, and Resume
// finishes the walk into a buffer, storing and hashing each return
// address (the depot's hash,
// internal/tracehash, written out in the loop), and the depot's lookup
// with that hash compares the one candidate. A hit returns its handle:
// the record was checked when it was stored, and verdicts never change
// (an address returns into one function at one inline depth for the life
// of the program).
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

// WalkHash stores the return addresses of the records from fp on (start,
// the frame record of the public Save, or where SkipIDFrames arrived from
// it) into rec until rec is full or the chain ends, hashing each one as it
// stores it (tracehash.Step, written out: the loop calls nothing, even at
// -N -l), and returns the count and the running hash. The first word
// carries cut, the logical frames to drop from the first frame's
// expansion. ok is false if the walk stopped at a record that broke a rule
// or at the known cgo boundary, or if the first address does not fit
// below the record's tags: then only ResolveID can say what to store.
// (WalkFirst and Resume are this, in two steps.)
//
//go:norace
//go:nocheckptr
func WalkHash(start, fp unsafe.Pointer, cut int, rec []uint64, seed, mul uint64) (n int, h uint64, ok bool) {
	n, h, _, why := walkHashOn(start, fp, cut, 0, seed, rec, mul)
	return n, h, why != walkBroken
}

// How walkHashOn stopped.
const (
	walkEnd    = iota // at the end of the chain
	walkFull          // rec is full; the chain may go on
	walkBroken        // at a record that broke a rule, the boundary, or a wide first address
	walkWrong         // (walkCompare) at a return address the guess does not have
)

// walkHashOn is WalkHash from record fp on, as frame n of the walk (the
// frames before it already in rec, hashing to h): it returns the frames
// stored, their hash, the next record when rec filled (its pointer
// checked by the rules, its words not read) and why it stopped. The loop
// calls nothing, even at -N -l; the bound is computed from start, so a
// caller may have called anything before.
//
//go:norace
//go:nocheckptr
func walkHashOn(start, fp unsafe.Pointer, cut, n int, h uint64, rec []uint64, mul uint64) (int, uint64, unsafe.Pointer, int) {
	stop := stopPC.Load()
	limit := min(uintptr(start), ^uintptr(0)-maxStack) + maxStack // limitFor(start), clamped
	for ; n < len(rec); n++ {
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		next := *(*unsafe.Pointer)(fp)
		w := uint64(ret)
		if n == 0 {
			if ret >= addrMask {
				return 1, 0, nil, walkBroken
			}
			w |= uint64(cut) << addrBits
		}
		rec[n] = w
		t := w * mul
		h = bits.RotateLeft64(h, tracehash.Rot) ^ t ^ t>>tracehash.Fold
		if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 || ret == stop {
			if u != 0 || ret == stop {
				return n + 1, h, nil, walkBroken
			}
			return n + 1, h, nil, walkEnd
		}
		fp = next
	}
	return n, h, fp, walkFull
}

// Hit is the public Save's one pass when the stack is its guess's: the
// walk from record fp (start, the frame record of the public Save, or
// where SkipIDFrames arrived from it, with cut). It returns the guess's
// handle and true, having counted the hit in the depot's statistics,
// exactly when the slot of the first hintFrames frames is sure (see
// hintFrames) and names the stack's record. The first frames are read
// into registers (not hashed: hintKey), the guess's first frames compared
// with them, then walkCompare compares the rest. Otherwise it returns
// false, and WalkFirst walks the first frames again for Resume (no second
// guess: a Guess for Hit to fill on its way out cost a hit 2 to 4 ns,
// more than the frames read again cost a miss).
//
//go:norace
//go:nocheckptr
func (ids *IDs) Hit(start, fp unsafe.Pointer, cut int) (uint32, bool) {
	if ids.MaxFrames <= hintFrames || ids.hints == nil {
		return 0, false
	}
	stop := stopPC.Load()
	limit := min(uintptr(start), ^uintptr(0)-maxStack) + maxStack // limitFor(start), clamped
	r0 := *(*uintptr)(unsafe.Add(fp, ptrSize))
	p1 := *(*unsafe.Pointer)(fp)
	if u := uintptr(p1); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 || r0 == stop || r0 >= addrMask {
		return 0, false
	}
	w0 := uint64(r0) | uint64(cut)<<addrBits
	r1 := *(*uintptr)(unsafe.Add(p1, ptrSize))
	p2 := *(*unsafe.Pointer)(p1)
	if u := uintptr(p2); u <= uintptr(p1) || u >= limit || u&(ptrSize-1) != 0 || r1 == stop {
		return 0, false
	}
	r2 := *(*uintptr)(unsafe.Add(p2, ptrSize))
	p3 := *(*unsafe.Pointer)(p2)
	if u := uintptr(p3); u <= uintptr(p2) || u >= limit || u&(ptrSize-1) != 0 || r2 == stop {
		return 0, false
	}
	r3 := *(*uintptr)(unsafe.Add(p3, ptrSize))
	p4 := *(*unsafe.Pointer)(p3)
	if u := uintptr(p4); u <= uintptr(p3) || u >= limit || u&(ptrSize-1) != 0 || r3 == stop {
		return 0, false
	}
	slot, tag := hintSlot(hintKey(w0, uint64(r1), uint64(r2), uint64(r3)))
	e := ids.hints[slot].Load()
	if e>>hintTagShift != tag || e&hintConfMask < hintGuessConf {
		return 0, false
	}
	gf := ids.layout.Frames(uint32(e))
	if *(*[hintFrames]uint64)(gf) != [hintFrames]uint64{w0, uint64(r1), uint64(r2), uint64(r3)} {
		return 0, false
	}
	gn := min(int(e>>32&(1<<9-1)), ids.MaxFrames)
	n, why := walkCompare(start, p4, gf, hintFrames, gn)
	if !(why == walkFull && n == ids.MaxFrames || why == walkEnd && n == gn) {
		return 0, false
	}
	if e&hintConfMask != hintConfMask && ids.roll()%hintOdds == 0 {
		ids.hints[slot].CompareAndSwap(e, e+1<<hintConfShift) // right: surer
	}
	var x byte
	ids.layout.CountHit(uintptr(unsafe.Pointer(&x)))
	return uint32(e), true
}

// WalkFirst walks the first hintFrames frames from record fp (start,
// the frame record of the public Save, or where SkipIDFrames arrived from
// it, with cut) into g, hashing them, for Resume: the start of the walk
// after Hit did not hit.
//
//go:norace
//go:nocheckptr
func (ids *IDs) WalkFirst(start, fp unsafe.Pointer, cut int, g *Guess) {
	k := min(ids.MaxFrames, hintFrames)
	n, h, next, why := walkHashOn(start, fp, cut, 0, ids.Seed, g.first[:k], ids.Mul)
	g.k, g.n, g.h, g.why = k, n, h, why
	if why == walkFull && k < ids.MaxFrames {
		g.off = uintptr(next) - uintptr(start)
	}
}

// walkCompare walks on from record fp, as frame n of the walk, while the
// return addresses equal the guess's frames at gf, up to frame m: it
// returns the frames walked and found equal and why it stopped (walkWrong
// at the first that differs; walkFull after frame m, the next record's
// pointer checked by the rules). A loop of its own, so that the record
// pointer it carries stays in a register (inside the guessing walk it was
// spilled each frame: 24 ns at depth 128). The loop calls nothing, even
// at -N -l.
//
//go:norace
//go:nocheckptr
func walkCompare(start, fp, gf unsafe.Pointer, n, m int) (int, int) {
	stop := stopPC.Load()
	limit := min(uintptr(start), ^uintptr(0)-maxStack) + maxStack // limitFor(start), clamped
	// Four frames a turn: the loop's own count and branch are a quarter
	// of what they would be, then the rest one at a time.
	for ; n+3 < m; n += 4 {
		g := (*[4]uint64)(unsafe.Add(gf, n*8))
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		p1 := *(*unsafe.Pointer)(fp)
		if uint64(ret) != g[0] {
			return n, walkWrong
		}
		if u := uintptr(p1); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 || ret == stop {
			if u != 0 || ret == stop {
				return n, walkBroken
			}
			return n + 1, walkEnd
		}
		ret = *(*uintptr)(unsafe.Add(p1, ptrSize))
		p2 := *(*unsafe.Pointer)(p1)
		if uint64(ret) != g[1] {
			return n + 1, walkWrong
		}
		if u := uintptr(p2); u <= uintptr(p1) || u >= limit || u&(ptrSize-1) != 0 || ret == stop {
			if u != 0 || ret == stop {
				return n + 1, walkBroken
			}
			return n + 2, walkEnd
		}
		ret = *(*uintptr)(unsafe.Add(p2, ptrSize))
		p3 := *(*unsafe.Pointer)(p2)
		if uint64(ret) != g[2] {
			return n + 2, walkWrong
		}
		if u := uintptr(p3); u <= uintptr(p2) || u >= limit || u&(ptrSize-1) != 0 || ret == stop {
			if u != 0 || ret == stop {
				return n + 2, walkBroken
			}
			return n + 3, walkEnd
		}
		ret = *(*uintptr)(unsafe.Add(p3, ptrSize))
		p4 := *(*unsafe.Pointer)(p3)
		if uint64(ret) != g[3] {
			return n + 3, walkWrong
		}
		if u := uintptr(p4); u <= uintptr(p3) || u >= limit || u&(ptrSize-1) != 0 || ret == stop {
			if u != 0 || ret == stop {
				return n + 3, walkBroken
			}
			return n + 4, walkEnd
		}
		fp = p4
	}
	for ; n < m; n++ {
		ret := *(*uintptr)(unsafe.Add(fp, ptrSize))
		next := *(*unsafe.Pointer)(fp)
		if uint64(ret) != *(*uint64)(unsafe.Add(gf, n*8)) {
			return n, walkWrong
		}
		if u := uintptr(next); u <= uintptr(fp) || u >= limit || u&(ptrSize-1) != 0 || ret == stop {
			if u != 0 || ret == stop {
				return n, walkBroken
			}
			return n + 1, walkEnd
		}
		fp = next
	}
	return n, walkFull
}

// A Guess is where WalkFirst stopped. It holds no pointers: the record
// to go on from is an offset from the walk's start, which a stack move
// keeps.
type Guess struct {
	first [hintFrames]uint64 // the first k frames
	k, n  int                // frames walked: k, or fewer if the chain ended
	h     uint64             // the hash of the first n
	off   uintptr            // the record to go on from, as frame n, less start (0: the walk is over)
	why   int                // how the walk stopped
}

// OK reports whether Resume can finish the walk: false if it stopped at a
// record that broke a rule or at the boundary, or the first address is
// wide (then only ResolveID can say what to store).
func (g *Guess) OK() bool { return g.why != walkBroken }

// Resume finishes the walk of g from start (the frame record of the
// public Save) into rec (MaxFrames long), as WalkHash would have walked
// it, and returns WalkHash's results. The caller then looks the record up
// with the depot's LookupHashed (called directly: through a func value,
// rec, on its stack, would escape) and, if it is found, makes it the
// guess (SetHint).
//
//go:norace
//go:nocheckptr
func (ids *IDs) Resume(start unsafe.Pointer, g *Guess, rec []uint64) (int, uint64, bool) {
	if g.why == walkBroken {
		return 0, 0, false
	}
	copy(rec, g.first[:g.n])
	h := g.h
	if g.off == 0 {
		return g.n, h, true
	}
	n, h, _, why := walkHashOn(start, unsafe.Add(start, g.off), 0, g.n, h, rec, ids.Mul)
	return n, h, why != walkBroken
}

// SetHint tells the slot of a walk's record that a save found it in the
// depot under handle hd, n frames long, without the slot's guess (g is
// where WalkFirst stopped): by the chances of hintFrames, if the slot
// holds the record, it is surer; if it holds another, less sure, or, at
// 0, it takes the record. An empty slot takes it at once.
func (ids *IDs) SetHint(g *Guess, n int, hd uint32) {
	if ids.hints == nil || g.k != hintFrames || n <= hintFrames || hd == 0 {
		return
	}
	slot, tag := hintSlot(hintKey(g.first[0], g.first[1], g.first[2], g.first[3]))
	e := uint64(hd) | uint64(n)<<32 | tag<<hintTagShift
	s := &ids.hints[slot]
	old := s.Load()
	if old == 0 {
		s.CompareAndSwap(0, e|1<<hintConfShift)
		return
	}
	// One save in hintOdds moves the slot: less sure at once, or, by
	// chance again, surer or another hint.
	r := ids.roll()
	if r%hintOdds != 0 {
		return
	}
	r /= hintOdds
	if next := nextHint(old, e); next != old {
		same := next&^hintConfMask == old&^hintConfMask
		if same && (next < old || r%hintOdds == 0) || !same && r/hintOdds%hintReplaceOdds == 0 {
			s.CompareAndSwap(old, next)
		}
	}
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
