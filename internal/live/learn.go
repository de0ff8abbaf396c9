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
	rets    []uintptr // the new return addresses, then a 0, for CallersFrames
	exps    []uintptr // their expansions, back to back
	logical []uintptr // what runtime.Callers returned
	first   []int     // for each of rets, its first frame in phys
	seen    map[uintptr]int
	pass    map[uintptr]struct{} // every address of this pass
}

var learners = sync.Pool{New: func() any {
	return &learner{pass: make(map[uintptr]struct{}), seen: make(map[uintptr]int)}
}}

// learn is Callers' miss path, called from Callers only: it walks the chain
// above Callers far enough for skip and len(pc), asks runtime.Callers once
// for the same stack, learns what the runtime records for every frame it
// walked (all new return addresses in one runtime.CallersFrames pass), and
// answers Callers from that same runtime.Callers result.
//
//go:noinline
func learn(skip int, pc []uintptr) int {
	learnCalls.Add(1)
	runtimeCalls.Add(1)
	l := learners.Get().(*learner)
	defer learners.Put(l)
	need := 1 + skip + len(pc) // Callers' own frame, then the answer
	complete := l.walk(getfp(), need+learnSlack)
	total := l.expandNew()
	size := max(total, need) + learnSlack
	if cap(l.logical) < size {
		l.logical = make([]uintptr, size)
	}
	logical := l.logical[:size]
	// Frame 0 is runtime.Callers, frame 1 is learn; frame 2 is Callers,
	// the frame whose return address is phys[0].ret.
	m := runtime.Callers(2, logical)
	learnFrames.Add(uint64(len(l.phys)))
	learned, relearns := align(l.phys, logical[:m], complete, m == len(logical), l.pass)
	noteLearned(learned, relearns)
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

// expandNew computes the expansion of every frame not known to the cache
// with one runtime.CallersFrames pass over their distinct return
// addresses, cuts the frames after the first special one, and returns the
// logical frames of the rest.
func (l *learner) expandNew() int {
	l.rets = l.rets[:0]
	l.first = l.first[:0]
	clear(l.seen)
	for i := range l.phys {
		p := &l.phys[i]
		if p.known {
			continue
		}
		if _, dup := l.seen[p.ret]; !dup {
			l.seen[p.ret] = i
			l.rets = append(l.rets, p.ret)
			l.first = append(l.first, i)
		}
	}
	l.exps = l.exps[:0]
	if len(l.rets) > 0 {
		// The trailing 0 belongs to no function: CallersFrames then
		// synthesizes the outer inlined frames of the last address too.
		frames := runtime.CallersFrames(append(l.rets, 0))
		i, from := 0, 0 // next address of rets, start of its group in exps
		for {
			f, more := frames.Next()
			if f.PC != 0 {
				l.exps = append(l.exps, f.PC+1)
			}
			if f.Func != nil {
				// The physical frame closes a group: its pc is the
				// return address less one (or the entry). An address
				// without symbols yields no frames at all: skip it
				// (expansion computes it alone).
				for k := i; k < len(l.rets) && k < i+4; k++ {
					if r := l.rets[k]; r == f.PC+1 || r == f.PC {
						p := &l.phys[l.first[k]]
						p.pcs, p.special, p.done = l.exps[from:len(l.exps):len(l.exps)], special(f.Function), true
						i = k + 1
						break
					}
				}
				from = len(l.exps)
			}
			if !more {
				break
			}
		}
	}
	total := 0
	for i := range l.phys {
		p := &l.phys[i]
		if p.known {
			total += len(p.shown)
			continue
		}
		if q := &l.phys[l.seen[p.ret]]; q != p {
			p.pcs, p.special, p.done = q.pcs, q.special, q.done
		}
		total += len(p.expansion())
		if p.special {
			isBoundary(p.ret) // remember a boundary for the walks
			l.phys = l.phys[:i+1]
			break
		}
	}
	return total
}
