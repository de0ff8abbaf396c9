package ptrauth

import "testing"

// sink keeps benchmark results alive.
var sink uint64

// benchPtrs are signed return addresses of both halves.
var benchPtrs = func() (ps [1024]uint64) {
	l := NewLayout(48, false)
	for i := range ps {
		p := uint64(0xffff800008000000) + uint64(i)*4
		if i%4 == 0 {
			p = 0x0000aaaabbbb0000 + uint64(i)*4
		}
		ps[i] = l.Sign(p, uint64(i), testKey, ImpDef)
	}
	return ps
}()

// BenchmarkStrip measures the strip as an unwinder uses it: one call per
// frame over a stream of different pointers. The sub-benchmarks run the
// same loop with:
//   - Strip: Layout.Strip (XPACI) on a Layout held in a local;
//   - StripData: Layout.StripData (XPACD);
//   - Masks: Masks.Strip with the masks hoisted out of the loop, the form
//     the SCS copy and the FP walk use;
//   - mask: a constant mask in place of the strip, the floor Strip is
//     meant to match.
//
// The loop/... pair strips a 1024-entry slice into another, as the SCS
// copy does, with hoisted Masks and with the bare mask; ns/ptr is the cost
// per pointer.
func BenchmarkStrip(b *testing.B) {
	l := NewLayout(48, false)
	b.Run("Strip", func(b *testing.B) {
		var acc uint64
		i := 0
		for b.Loop() {
			acc += l.Strip(benchPtrs[i%len(benchPtrs)])
			i++
		}
		sink = acc
	})
	b.Run("StripData", func(b *testing.B) {
		var acc uint64
		i := 0
		for b.Loop() {
			acc += l.StripData(benchPtrs[i%len(benchPtrs)])
			i++
		}
		sink = acc
	})
	b.Run("Masks", func(b *testing.B) {
		m := l.InsnMasks()
		var acc uint64
		i := 0
		for b.Loop() {
			acc += m.Strip(benchPtrs[i%len(benchPtrs)])
			i++
		}
		sink = acc
	})
	b.Run("mask", func(b *testing.B) {
		var acc uint64
		i := 0
		for b.Loop() {
			acc += benchPtrs[i%len(benchPtrs)] | 0xffff000000000000
			i++
		}
		sink = acc
	})
	var dst [len(benchPtrs)]uint64
	b.Run("loop/Masks", func(b *testing.B) {
		m := l.InsnMasks()
		for b.Loop() {
			for i, p := range &benchPtrs {
				dst[i] = m.Strip(p)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(benchPtrs)), "ns/ptr")
	})
	b.Run("loop/mask", func(b *testing.B) {
		for b.Loop() {
			for i, p := range &benchPtrs {
				dst[i] = p | 0xffff000000000000
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(benchPtrs)), "ns/ptr")
	})
	sink = dst[len(dst)-1]
}

func BenchmarkStripKernelStyle(b *testing.B) {
	l := NewLayout(48, false)
	var acc uint64
	i := 0
	for b.Loop() {
		acc += l.StripKernelStyle(benchPtrs[i%len(benchPtrs)])
		i++
	}
	sink = acc
}

func BenchmarkComputePAC(b *testing.B) {
	for _, alg := range algorithms {
		b.Run(alg.String(), func(b *testing.B) {
			ComputePAC(0, 0, testKey, alg) // build tables outside the loop
			x := uint64(0xffff800008123450)
			for b.Loop() {
				x = ComputePAC(x, 0xffff80000a00fe30, testKey, alg)
			}
			sink = x
		})
	}
}

func BenchmarkQARMA64Reference(b *testing.B) {
	x := uint64(vecP)
	for b.Loop() {
		x = QARMA64(x, vecT, vecW0, vecK0, 2, 5)
	}
	sink = x
}

func BenchmarkSign(b *testing.B) {
	l := NewLayout(48, false)
	p := uint64(0xffff800008123450)
	var acc uint64
	for b.Loop() {
		acc += l.Sign(p^acc&0xff0, 0xffff80000a00fe30, testKey, QARMA5)
	}
	sink = acc
}

func BenchmarkAuth(b *testing.B) {
	l := NewLayout(48, false)
	s := l.Sign(0xffff800008123450, 0xffff80000a00fe30, testKey, QARMA5)
	var acc uint64
	for b.Loop() {
		p, _ := l.Auth(s, 0xffff80000a00fe30, testKey, QARMA5, KeyIA)
		acc += p
	}
	sink = acc
}
