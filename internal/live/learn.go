//go:build amd64 || arm64

package live

import (
	"runtime"
	"sync"
	"unsafe"
)

// maxLearnFrames bounds the physical frames one learning pass walks.
const maxLearnFrames = maxSkip + 1024

// learner is the reusable state of one learning pass (pooled: a cold call
// allocates only what the cache keeps).
type learner struct {
	phys    []physFrame
	logical []uintptr            // what runtime.Callers returned
	pass    map[uintptr]struct{} // every address of this pass
}

var learners = sync.Pool{New: func() any { return &learner{pass: make(map[uintptr]struct{})} }}

// learn is Callers' miss path, called from Callers only: it walks the chain
// above Callers far enough for skip and len(pc), asks runtime.Callers once
// for the same stack, learns what the runtime records for every frame it
// walked by lining the frames up with that result (align; a new frame costs
// runtime.FuncForPC lookups, no runtime.CallersFrames, whose file and line
// decoding dominated the old cold call), and answers Callers from that same
// runtime.Callers result.
//
//go:noinline
func learn(skip int, pc []uintptr) int {
	learnCalls.Add(1)
	runtimeCalls.Add(1)
	l := learners.Get().(*learner)
	defer learners.Put(l)
	need := 1 + skip + len(pc) // Callers' own frame, then the answer
	complete := l.walk(getfp(), need+learnSlack)
	total := l.symbolizeNew()
	size := max(total, need) + learnSlack
	if cap(l.logical) < size {
		l.logical = make([]uintptr, size)
	}
	logical := l.logical[:size]
	// Frame 0 is runtime.Callers, frame 1 is learn; frame 2 is Callers,
	// the frame whose return address is phys[0].ret.
	m := runtime.Callers(2, logical)
	learnFrames.Add(uint64(len(l.phys)))
	tick()
	learned, recent := align(l.phys, logical[:m], complete, m == len(logical), l.pass, pcEntry)
	noteLearned(learned, recent)
	n := 0
	if 1+skip < m {
		n = copy(pc, logical[1+skip:m])
	}
	clear(l.pass)
	return n
}

// walk collects the physical frames from fp on until they cover want
// logical frames, and reports whether it reached the end of the chain. It
// stops at a known boundary and at any record that breaks a rule. Lookups
// are calls (and may move the stack), so the bound is recomputed from
// start before each record is checked, with no call in between.
func (l *learner) walk(fp unsafe.Pointer, want int) bool {
	l.phys = l.phys[:0]
	if fp == nil || uintptr(fp)&(ptrSize-1) != 0 {
		return false
	}
	start := fp
	total := 0
	for total < want && len(l.phys) < maxLearnFrames {
		f := physFrame{ret: *(*uintptr)(unsafe.Add(fp, ptrSize))}
		l.pass[f.ret] = struct{}{}
		if k, pcs, ok := lookup(f.ret); ok && k != kindSlow {
			f.known = true
			switch k {
			case kindSelf:
				f.shown = []uintptr{f.ret}
			case kindMany:
				f.shown = pcs
			}
			total += len(f.shown)
		} else {
			total++ // at least; expandNew computes the exact count
		}
		l.phys = append(l.phys, f)
		if f.ret == stopPC.Load() {
			return false
		}
		limit := limitFor(start)
		nfp := *(*uintptr)(fp)
		if nfp-uintptr(fp)-1 >= limit-uintptr(fp)-1 || nfp&(ptrSize-1) != 0 {
			return nfp == 0
		}
		fp = *(*unsafe.Pointer)(fp) // the word just checked, reloaded as a pointer
	}
	return false
}

// symbolizeNew finds the physical function of every frame not known to
// the cache, cuts the frames after the first special one, and returns an
// estimate of their logical frames (one per new frame).
func (l *learner) symbolizeNew() int {
	total := 0
	for i := range l.phys {
		p := &l.phys[i]
		if p.known {
			total += len(p.shown)
			continue
		}
		total++
		p.entry, p.special = symbolize(p.ret)
		if p.special {
			isBoundary(p.ret) // remember a boundary for the walks
			l.phys = l.phys[:i+1]
			break
		}
	}
	return total
}
