package percpu

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"unsafe"
)

// lineOf returns the 64-byte cache line index of p's address relative to base.
func gap(a, b uintptr) uintptr { return b - a }

func TestPaddingSeparatesCPUs(t *testing.T) {
	// The distance from the end of one CPU's value to the start of the next
	// CPU's value must be at least CacheLine, whatever T is.
	check := func(name string, stride, size uintptr) {
		t.Helper()
		if stride < size+CacheLine {
			t.Errorf("%s: stride %d, value size %d: slots closer than a cache line", name, stride, size)
		}
	}
	check("uint64", unsafe.Sizeof(slot[uint64]{}), unsafe.Sizeof(uint64(0)))
	check("[24]byte", unsafe.Sizeof(slot[[24]byte]{}), 24)
	check("[200]byte", unsafe.Sizeof(slot[[200]byte]{}), 200)
	check("atomic", unsafe.Sizeof(u64slot{}), 8)
	if off := unsafe.Offsetof(slot[uint64]{}.v); off != 0 {
		t.Errorf("value not at slot start: %d", off)
	}

	v, _ := New[uint64](4)
	for i := 0; i+1 < v.NumCPU(); i++ {
		a := uintptr(unsafe.Pointer(v.Ptr(i)))
		b := uintptr(unsafe.Pointer(v.Ptr(i + 1)))
		if gap(a, b) < 8+CacheLine {
			t.Fatalf("cpu %d and %d values %d bytes apart", i, i+1, gap(a, b))
		}
		if a/64+1 >= b/64 {
			t.Fatalf("cpu %d and %d values share or touch a 64-byte line", i, i+1)
		}
	}
	u, _ := NewUint64(3)
	for i := 0; i+1 < u.NumCPU(); i++ {
		a := uintptr(unsafe.Pointer(&u.slots[i].v))
		b := uintptr(unsafe.Pointer(&u.slots[i+1].v))
		if a/64+1 >= b/64 {
			t.Fatalf("atomic cpu %d and %d share a line", i, i+1)
		}
	}
}

func TestIndependentSlots(t *testing.T) {
	v, err := New[[3]int](5)
	if err != nil {
		t.Fatal(err)
	}
	for c := 0; c < 5; c++ {
		v.Ptr(c)[1] = c * 10
	}
	for c := 0; c < 5; c++ {
		p, err := v.Lookup(c)
		if err != nil || p[1] != c*10 || p[0] != 0 {
			t.Fatalf("cpu %d: %v %v", c, p, err)
		}
	}
	u, _ := NewUint64(2)
	u.Store(1, 7)
	if u.Load(0) != 0 || u.Load(1) != 7 || u.Swap(1, 9) != 7 || u.Load(1) != 9 {
		t.Fatal("Uint64 slots not independent")
	}
}

func TestBadCPU(t *testing.T) {
	if _, err := New[int](0); err == nil {
		t.Error("New(0) accepted")
	}
	if _, err := NewUint64(-1); err == nil {
		t.Error("NewUint64(-1) accepted")
	}
	v, _ := New[int](2)
	u, _ := NewUint64(2)
	for _, cpu := range []int{-1, 2, 1 << 30} {
		var re *RangeError
		if _, err := v.Lookup(cpu); !errors.As(err, &re) || re.CPU != cpu || re.NumCPU != 2 {
			t.Errorf("Lookup(%d) err = %v", cpu, err)
		}
		if _, err := u.TryLoad(cpu); !errors.As(err, &re) {
			t.Errorf("TryLoad(%d) err = %v", cpu, err)
		}
		for name, f := range map[string]func(){
			"Ptr":   func() { v.Ptr(cpu) },
			"Load":  func() { u.Load(cpu) },
			"Store": func() { u.Store(cpu, 1) },
		} {
			func() {
				defer func() {
					r := recover()
					if _, ok := r.(*RangeError); !ok {
						t.Errorf("%s(%d) panic = %v, want *RangeError", name, cpu, r)
					}
				}()
				f()
			}()
		}
	}
}

// TestConcurrentReaders has each CPU's owner write its word while readers on
// other goroutines read every CPU's word: the race detector must stay quiet
// and every value read must be one the owner wrote.
func TestConcurrentReaders(t *testing.T) {
	const ncpu, n = 4, 20000
	u, _ := NewUint64(ncpu)
	var wg sync.WaitGroup
	for c := 0; c < ncpu; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := uint64(1); i <= n; i++ {
				u.Store(c, uint64(c)<<32|i)
			}
		}(c)
	}
	errc := make(chan error, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := make([]uint64, ncpu)
			for i := 0; i < n; i++ {
				c := i % ncpu
				v := u.Load(c)
				if v != 0 && (v>>32 != uint64(c) || v < last[c]) {
					errc <- errors.New("reader saw a foreign or older value")
					return
				}
				last[c] = v
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for c := 0; c < ncpu; c++ {
		if got := u.Load(c); got != uint64(c)<<32|n {
			t.Fatalf("cpu %d final %#x", c, got)
		}
	}
}

func ExampleUint64() {
	saved, _ := NewUint64(2)
	saved.Store(1, 0xffff800008001000) // CPU 1 enters an IRQ
	fmt.Printf("cpu0 %#x cpu1 %#x\n", saved.Load(0), saved.Load(1))
	// Output: cpu0 0x0 cpu1 0xffff800008001000
}
