//go:build amd64 || arm64

package live

import (
	"runtime"
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
// and wrapper frames are not hidden. A walk stopped by a broken frame record
// returns the frames found so far and a *errs.CorruptError.
//
//go:noinline
func CallersFP(skip int, pc []uintptr) (int, error) {
	return walkFP(getfp(), skip, pc)
}

// Callers is runtime.Callers with skip 0 meaning the frame that called
// Callers: it stores the same pcs that runtime.Callers(skip+1, pc) would
// store if called at the same place. See the package doc.
//
//go:noinline
func Callers(skip int, pc []uintptr) int {
	if skip < 0 {
		skip = 0
	}
	fp := getfp()
	n, st := walkLogical(fp, skip, pc)
	if st == walkMiss {
		learn(clampSkip(skip) + len(pc))
		n, st = walkLogical(fp, skip, pc)
	}
	if st != walkDone {
		slowCalls.Add(1)
		// Frame 0 is runtime.Callers, frame 1 is this function.
		return runtime.Callers(clampSkip(skip)+2, pc)
	}
	return n
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

// walkLogical walks the frame-record chain from fp and stores the logical
// pcs of each frame, from the cache, after dropping skip of them.
func walkLogical(fp unsafe.Pointer, skip int, pc []uintptr) (int, int) {
	if fp == nil || checkFirst(fp) != nil {
		return 0, walkSlow
	}
	limit := limitFor(fp)
	n := 0
	for n < len(pc) {
		ret := retPC(fp)
		k, e := kindSelf, (*entry)(nil)
		if !isSelf(ret) { // one load answers most frames
			if e = lookup(ret); e == nil {
				return n, walkMiss
			}
			k = e.kind
		}
		switch k {
		case kindSelf:
			if skip > 0 {
				skip--
			} else {
				pc[n] = ret
				n++
			}
		case kindMany:
			for _, p := range e.pcs {
				if skip > 0 {
					skip--
					continue
				}
				if n == len(pc) {
					return n, walkDone
				}
				pc[n] = p
				n++
			}
		case kindHidden:
		default:
			return n, walkSlow
		}
		if nfp := *(*uintptr)(fp); suspect(fp, nfp, limit) {
			if nfp == 0 {
				return n, walkDone
			}
			return n, walkSlow
		}
		fp = *(*unsafe.Pointer)(fp) // the word just checked, reloaded as a pointer
	}
	return n, walkDone
}

// learn walks the chain above its caller far enough to cover need logical
// frames, asks runtime.Callers for the same stack, and caches what the
// runtime records for every frame it walked.
//
//go:noinline
func learn(need int) {
	learnCalls.Add(1)
	fp := getfp()
	if fp == nil || checkFirst(fp) != nil {
		return
	}
	start := fp
	var phys []physFrame
	seen := make(map[uintptr]physFrame) // deep recursion repeats return addresses
	total := 0
	complete := false
	for total < need+learnSlack {
		f := physFrame{ret: retPC(fp)}
		if e := lookup(f.ret); e != nil && e.kind != kindSlow {
			f.known = e
			total += len(e.shown())
		} else {
			if g, ok := seen[f.ret]; ok {
				f = g
			} else {
				f.expansion()
				seen[f.ret] = f
			}
			total += len(f.pcs)
		}
		phys = append(phys, f)
		if f.special {
			break
		}
		if nfp := *(*uintptr)(fp); suspect(fp, nfp, limitFor(start)) {
			complete = nfp == 0
			break
		}
		fp = *(*unsafe.Pointer)(fp) // the word just checked, reloaded as a pointer
	}
	logical := make([]uintptr, total+learnSlack)
	// Frame 0 is runtime.Callers, frame 1 is learn; frame 2 is the frame
	// whose return address is phys[0].ret.
	m := runtime.Callers(2, logical)
	learnFrames.Add(uint64(len(phys)))
	align(phys, logical[:m], complete, m == len(logical))
}
