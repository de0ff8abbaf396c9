//go:build amd64 || arm64

package live

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// skipFrames is how many physical frames of the verdicts the skip of
// logical frames passes over entirely.
func skipFrames(verdicts [][]uintptr, skip int) int {
	for i, v := range verdicts {
		if len(v) > skip {
			return i
		}
		skip -= len(v)
	}
	return len(verdicts)
}

// fastWalk, on crafted chains whose every return address has a planted
// verdict (itself, an expansion of two or three logical pcs, or hidden),
// stores what the verdicts say, from every skip and into buffers shorter
// and longer than the answer, after a raw walk of any length into pc (as
// Callers' walkProbe leaves it): the expansions that run out of room in
// place, the read-ahead buffer and its refills, and a first expansion
// with more than fastChunk return addresses not read yet after it; and
// expandWalk the same, which drops the skip by the verdicts first (up to
// maxFastSkip frames; beyond, it must decline and leave pc alone).
func TestFastWalkModel(t *testing.T) {
	resetCache()
	defer resetCache()
	pass := func(uintptr) bool { return true }
	const n = 150
	r := rand.New(rand.NewPCG(3, 4))
	patterns := map[string]func(i int) int{ // 0 self, 1 many, 2 hidden
		"self":        func(int) int { return 0 },
		"dense":       func(i int) int { return (i%3 + 1) % 2 },
		"first-many":  func(i int) int { return map[bool]int{true: 1}[i == 0] },
		"mixed":       func(int) int { return []int{0, 0, 0, 1, 2}[r.IntN(5)] },
		"many-hidden": func(i int) int { return 1 + i%2 },
	}
	for name, kindOf := range patterns {
		resetCache()
		verdicts := make([][]uintptr, n)
		f := newFake(2*n + 2)
		for i := range n {
			ret := uintptr(0x4a0000 + i*0x40)
			switch kindOf(i) {
			case 0:
				verdicts[i] = []uintptr{ret}
			case 1:
				verdicts[i] = []uintptr{ret, ret + 1, ret + 2}[:2+i%2]
			case 2:
				verdicts[i] = nil
			}
			insert(ret, verdicts[i], false, pass)
			var next uintptr
			if i+1 < n {
				next = f.addr(2 * (i + 1))
			}
			f.rec(2*i, next, ret)
		}
		var all []uintptr
		for _, v := range verdicts {
			all = append(all, v...)
		}
		start := f.fp(0)
		for _, skip := range []int{0, 1, 2, 3, 5, 40, len(all) - 1, len(all), len(all) + 3} {
			for _, size := range []int{1, 2, 7, 32, 33, 64, 100, len(all), len(all) + 9} {
				for _, m0 := range []int{1, 3, 40, size} {
					t.Run(fmt.Sprintf("%s/skip=%d/len=%d/m=%d", name, skip, size, m0), func(t *testing.T) {
						pc := make([]uintptr, size+1)
						pc[size] = 0xdead
						m, why, fp := rawWalk(start, start, pc[:min(m0, size)], 0)
						got, st := fastWalk(start, fp, skip, pc[:size], m, why)
						want := all[min(skip, len(all)):]
						want = want[:min(len(want), size)]
						if st != walkDone || !slices.Equal(pc[:got], want) || pc[size] != 0xdead {
							t.Fatalf("status %d, %d pcs %#x\nwant %d pcs %#x (guard %#x)", st, got, pc[:got], len(want), want, pc[size])
						}
						// expandWalk, from the start, as Callers calls it
						// after walkProbe met a frame with inlined calls.
						clear(pc[:size])
						got, st, ok := expandWalk(start, skip, pc[:size])
						if !ok {
							if drop := skipFrames(verdicts, skip); drop <= maxFastSkip {
								t.Fatalf("expandWalk declined a skip of %d frames", drop)
							}
							if slices.ContainsFunc(pc[:size], func(p uintptr) bool { return p != 0 }) {
								t.Fatalf("expandWalk declined after storing %#x", pc[:size])
							}
							return
						}
						if st != walkDone || !slices.Equal(pc[:got], want) || pc[size] != 0xdead {
							t.Fatalf("expandWalk: status %d, %d pcs %#x\nwant %d pcs %#x (guard %#x)", st, got, pc[:got], len(want), want, pc[size])
						}
					})
				}
			}
		}
	}
}

// expandWalk on any chain (fuzzStack's: records that end the chain, break
// a rule or link on), with planted verdicts for every return address
// (itself, two or three pcs, hidden): when it does not decline, it stores
// exactly the logical pcs of the records rawWalk reads, less the skip,
// as far as pc holds them, never past len(pc); it says done when the
// chain ended or pc filled, and slow when a broken record came first;
// when it declines, pc is untouched.
func FuzzExpandWalk(f *testing.F) {
	f.Add([]byte{2, 4, 6, 8, 0xff}, []byte{0, 1, 2}, uint8(0), uint8(16))
	f.Add([]byte{2, 4, 6, 9, 10}, []byte{1, 1, 0}, uint8(3), uint8(5))
	f.Add([]byte{2, 4, 0x90}, []byte{3}, uint8(1), uint8(40))
	f.Fuzz(func(t *testing.T, links, kinds []byte, skip, size uint8) {
		resetCache()
		defer resetCache()
		pass := func(uintptr) bool { return true }
		const words = 64
		fk := fuzzStack(words, links)
		start := fk.fp(0)
		phys := make([]uintptr, words)
		n, why, _ := rawWalk(start, start, phys, 0)
		var all []uintptr // the logical pcs of every record read
		for i, ret := range phys[:n] {
			var v []uintptr
			k := byte(0)
			if len(kinds) > 0 {
				k = kinds[i%len(kinds)] % 4
			}
			switch k {
			case 0:
				v = []uintptr{ret}
			case 1:
				v = []uintptr{ret, ret + 0x101}
			case 2:
				v = []uintptr{ret, ret + 0x101, ret + 0x202}
			}
			insert(ret, v, false, pass)
			all = append(all, v...)
		}
		s, m := int(skip%24), int(size%48)
		pc := make([]uintptr, m+1)
		pc[m] = 0xdead
		got, st, ok := expandWalk(start, s, pc[:m])
		if pc[m] != 0xdead {
			t.Fatalf("expandWalk wrote beyond len(pc)")
		}
		if !ok {
			if slices.ContainsFunc(pc[:m], func(p uintptr) bool { return p != 0 }) {
				t.Fatalf("expandWalk declined after storing %#x", pc[:m])
			}
			return
		}
		want := all[min(s, len(all)):]
		switch {
		case len(want) >= m:
			if st != walkDone || !slices.Equal(pc[:got], want[:m]) {
				t.Fatalf("pc full: status %d, %#x, want %#x", st, pc[:got], want[:m])
			}
		case why == rawEnd:
			if st != walkDone || !slices.Equal(pc[:got], want) {
				t.Fatalf("chain end: status %d, %#x, want %#x", st, pc[:got], want)
			}
		default:
			if st != walkSlow {
				t.Fatalf("broken chain (%d): status %d, %#x", why, st, pc[:got])
			}
		}
	})
}
