package fp

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/unwindkit/unwindkit/ptrauth"
)

// benchConfig is a plain task stack of depth frame records ending at FINAL,
// with return addresses signed when pac is set. The walk reports depth+1
// frames (the start PC plus one per record).
func benchConfig(b *testing.B, depth int, pac bool) *Config {
	m := newMachine(b)
	s := m.taskStack("task", stackTop, TaskStackSize)
	var layout ptrauth.Layout
	if pac {
		layout = ptrauth.NewLayout(48, false)
	}
	key := ptrauth.Key{Hi: 1, Lo: 2}
	for i := 1; i <= depth; i++ {
		lr := pc(i)
		if pac {
			lr = layout.Sign(lr, s.sp, key, ptrauth.QARMA5)
		}
		s.call(lr)
	}
	c := m.config(s, pc(0))
	c.Layout = layout
	return c
}

var benchDepths = []int{8, 32, 128}

// benchBytesConfig is benchConfig over caller bytes (Stack.Data), the
// memory an outside module hands to the walk.
func benchBytesConfig(b *testing.B, depth int, pac bool) *Config {
	d := dataConfig(benchConfig(b, depth, pac))
	if d == nil {
		b.Fatal("no caller-bytes config")
	}
	return d
}

// BenchmarkSave walks the model's memory (atomic loads); BenchmarkSaveBytes
// the same stack as caller bytes. Both are compared with the same
// benchmark of the commit before caller bytes existed (BenchmarkSave).
func BenchmarkSave(b *testing.B)      { benchSave(b, benchConfig) }
func BenchmarkSaveBytes(b *testing.B) { benchSave(b, benchBytesConfig) }

func benchSave(b *testing.B, config func(*testing.B, int, bool) *Config) {
	for _, pac := range []bool{false, true} {
		for _, depth := range benchDepths {
			b.Run(fmt.Sprintf("pac=%v/depth=%d", pac, depth), func(b *testing.B) {
				c := config(b, depth, pac)
				store := make([]uint64, depth+8)
				if n, end, err := SaveEnd(c, store, 0); n != depth+1 || end != EndFinal || err != nil {
					b.Fatalf("%d %v %v", n, end, err)
				}
				b.ReportAllocs()
				for b.Loop() {
					Save(c, store, 0)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(depth+1), "ns/frame")
			})
		}
	}
}

// BenchmarkWalk and BenchmarkWalkBytes: Walk over the model's memory and
// over caller bytes.
func BenchmarkWalk(b *testing.B)      { benchWalk(b, benchConfig) }
func BenchmarkWalkBytes(b *testing.B) { benchWalk(b, benchBytesConfig) }

func benchWalk(b *testing.B, config func(*testing.B, int, bool) *Config) {
	for _, pac := range []bool{false, true} {
		for _, depth := range benchDepths {
			b.Run(fmt.Sprintf("pac=%v/depth=%d", pac, depth), func(b *testing.B) {
				c := config(b, depth, pac)
				var sum uint64
				b.ReportAllocs()
				for b.Loop() {
					Walk(c, func(f Frame) bool { sum += f.PC; return true })
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(depth+1), "ns/frame")
			})
		}
	}
}

// BenchmarkCopyBaseline is an SCS-style copy on the same kind of memory
// (until package scs exists to compare with directly): depth+1 return
// addresses read newest first from a region of words, PAC-stripped, into
// the store. Its ns/frame is the reference the FP walk is compared with.
func BenchmarkCopyBaseline(b *testing.B) {
	for _, pac := range []bool{false, true} {
		for _, depth := range benchDepths {
			b.Run(fmt.Sprintf("pac=%v/depth=%d", pac, depth), func(b *testing.B) {
				m := newMachine(b)
				r := m.region("scs", "scs", 0x50000, 1024*8)
				var layout ptrauth.Layout
				if pac {
					layout = ptrauth.NewLayout(48, false)
				}
				for i := 0; i <= depth; i++ {
					r.Store(r.Base+8*uint64(i), layout.Sign(pc(i), uint64(i), ptrauth.Key{Hi: 1, Lo: 2}, ptrauth.QARMA5))
				}
				store := make([]uint64, depth+8)
				b.ReportAllocs()
				for b.Loop() {
					scsCopy(r.Words(), depth+1, layout, store)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(depth+1), "ns/frame")
			})
		}
	}
}

//go:noinline
func scsCopy(words []uint64, top int, layout ptrauth.Layout, store []uint64) int {
	n := 0
	for i := top - 1; i >= 0 && n < len(store); i-- {
		store[n] = layout.Strip(atomic.LoadUint64(&words[i]))
		n++
	}
	return n
}
