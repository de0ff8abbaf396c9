package mem

import (
	"math"
	"sync"
	"testing"
)

func TestRegionShape(t *testing.T) {
	for _, tc := range []struct {
		base, size uint64
		ok         bool
	}{
		{0x1000, 0x100, true},
		{0x1001, 0x100, false},
		{0x1000, 0x101, false},
		{0x1000, 0, false},
		{math.MaxUint64 - 0xf, 0x8, true},
		{math.MaxUint64 - 0x7, 0x8, false}, // end would be 2^64
		{math.MaxUint64 - 0x7, 0x10, false},
	} {
		_, err := NewRegion("r", "test", tc.base, tc.size)
		if (err == nil) != tc.ok {
			t.Errorf("NewRegion(%#x, %#x) err=%v, want ok=%v", tc.base, tc.size, err, tc.ok)
		}
	}
}

func TestRegionBounds(t *testing.T) {
	r, err := NewRegion("r", "test", 0x1000, 0x20)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []uint64{0x1000, 0x1008, 0x1018} {
		if !r.Store(a, a*3) {
			t.Fatalf("Store(%#x) failed", a)
		}
		if v, ok := r.Load(a); !ok || v != a*3 {
			t.Fatalf("Load(%#x) = %#x,%v", a, v, ok)
		}
	}
	for _, a := range []uint64{0, 0xff8, 0x1020, 0x1004, 0x1001, math.MaxUint64 - 7, math.MaxUint64} {
		if _, ok := r.Load(a); ok {
			t.Errorf("Load(%#x) succeeded", a)
		}
		if r.Store(a, 1) {
			t.Errorf("Store(%#x) succeeded", a)
		}
	}
	for _, tc := range []struct {
		addr, n uint64
		ok      bool
	}{
		{0x1000, 0x20, true},
		{0x1010, 0x10, true},
		{0x1010, 0x11, false},
		{0x1020, 0, true},
		{0x1021, 0, false},
		{0xff8, 8, false},
		{0x1008, math.MaxUint64, false},
		{math.MaxUint64, 2, false},
	} {
		if got := r.Contains(tc.addr, tc.n); got != tc.ok {
			t.Errorf("Contains(%#x, %#x) = %v, want %v", tc.addr, tc.n, got, tc.ok)
		}
	}
}

func TestLoad32(t *testing.T) {
	r, _ := NewRegionBytes("text", "text", 0x4000, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	if r.Size() != 16 {
		t.Fatalf("size %d, want padded 16", r.Size())
	}
	for _, tc := range []struct {
		addr uint64
		want uint32
	}{{0x4000, 0x04030201}, {0x4004, 0x08070605}, {0x4008, 0x0c0b0a09}, {0x400c, 0}} {
		if v, ok := r.Load32(tc.addr); !ok || v != tc.want {
			t.Errorf("Load32(%#x) = %#x,%v want %#x", tc.addr, v, ok, tc.want)
		}
	}
	if _, ok := r.Load32(0x4002); ok {
		t.Error("misaligned Load32 succeeded")
	}
	if !r.Store32(0x4004, 0xd503233f) {
		t.Fatal("Store32 failed")
	}
	if v, _ := r.Load32(0x4004); v != 0xd503233f {
		t.Fatalf("after Store32 got %#x", v)
	}
	if v, _ := r.Load32(0x4000); v != 0x04030201 {
		t.Fatalf("Store32 clobbered neighbour: %#x", v)
	}
}

func TestMemoryFindAndOverlap(t *testing.T) {
	var m Memory
	a, _ := NewRegion("a", "t", 0x1000, 0x1000)
	b, _ := NewRegion("b", "t", 0x3000, 0x1000)
	c, _ := NewRegion("c", "t", 0x2000, 0x1000)
	for _, r := range []*Region{a, b, c} {
		if err := m.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range [][2]uint64{{0x1ff8, 0x10}, {0x3ff8, 8}, {0x0ff8, 0x10}, {0x0, 0x5000}} {
		r, _ := NewRegion("x", "t", bad[0], bad[1])
		if err := m.Add(r); err == nil {
			t.Errorf("overlapping region [%#x,+%#x) accepted", bad[0], bad[1])
		}
	}
	for _, tc := range []struct {
		addr uint64
		want *Region
	}{{0xfff, nil}, {0x1000, a}, {0x1fff, a}, {0x2000, c}, {0x3fff, b}, {0x4000, nil}, {math.MaxUint64, nil}} {
		if got := m.Find(tc.addr); got != tc.want {
			t.Errorf("Find(%#x) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	if !m.Store(0x2ff8, 42) {
		t.Fatal("store failed")
	}
	if v, ok := m.Load(0x2ff8); !ok || v != 42 {
		t.Fatal("load failed")
	}
	if m.FindName("b") != b || m.FindName("zz") != nil {
		t.Fatal("FindName")
	}
}

func TestConcurrentAccess(t *testing.T) {
	r, _ := NewRegion("r", "t", 0, 64)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := uint64(0); i < 10000; i++ {
			r.Store(8*(i%8), i)
		}
	}()
	go func() {
		defer wg.Done()
		for i := uint64(0); i < 10000; i++ {
			r.Load(8 * (i % 8))
			r.Load32(4 * (i % 16))
		}
	}()
	wg.Wait()
}

func FuzzAccess(f *testing.F) {
	f.Add(uint64(0x1000), uint64(0x40), uint64(0x1008), uint64(8))
	f.Fuzz(func(t *testing.T, base, size, addr, n uint64) {
		r, err := NewRegion("f", "t", base&^7, (size%4096+1)*8)
		if err != nil {
			return
		}
		v, ok := r.Load(addr)
		if ok != (addr%8 == 0 && addr >= r.Base && addr < r.End()) {
			t.Fatalf("Load(%#x) ok=%v for %s", addr, ok, r)
		}
		if ok && v != 0 {
			t.Fatal("fresh region not zero")
		}
		c := r.Contains(addr, n)
		want := addr >= r.Base && addr <= r.End() && n <= r.End()-addr
		if c != want {
			t.Fatalf("Contains(%#x,%#x)=%v want %v", addr, n, c, want)
		}
		r.Load32(addr)
	})
}
