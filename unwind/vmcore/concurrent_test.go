package vmcore

import (
	"slices"
	"sync"
	"testing"
)

// TestConcurrentReads: two goroutines read different pages of one Vmcore
// while it records; every value read is right and the recorded pages are
// exactly the union (run with -race).
func TestConcurrentReads(t *testing.T) {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	for i := uint64(0); i < stackSize; i += 8 {
		s.put64(s.pa(stackOff+i), 0xa000_0000+i)
	}
	v, err := loadBytes(s.bytes())
	if err != nil {
		t.Fatal(err)
	}
	v.RecordReads(true)
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := 0; rep < 50; rep++ {
				// goroutine 0 reads the even pages, 1 the odd ones.
				for off := uint64(g) << 12; off < stackSize; off += 2 << 12 {
					w, err := v.ReadVirt64(s.stackVA + off + 8)
					if err != nil || w != 0xa000_0000+off+8 {
						t.Errorf("read %#x: %#x, %v", off, w, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	got := v.PagesRead()
	for off := uint64(0); off < stackSize; off += 1 << 12 {
		if !slices.Contains(got, s.pa(stackOff+off)) {
			t.Errorf("page %#x not recorded", s.pa(stackOff+off))
		}
	}
}
