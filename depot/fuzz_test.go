package depot

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"unsafe"
)

// fuzzDepot builds a depot with persistent, refcounted and evicted records
// in two pools, and returns it with the handle → trace map of live records.
func fuzzDepot(t testing.TB) (*Depot, map[Handle][]uint64) {
	d := mustNew(t, Config{MaxPools: 3, MaxFrames: 40})
	live := map[Handle][]uint64{}
	for i, tr := range genTraces(400, 33, 5) {
		tr = tr[:1+i%33]
		flags := Flags(0)
		if i%3 != 0 {
			flags = FlagGet
		}
		h, err := d.SaveFlags(tr, flags)
		if err != nil {
			t.Fatal(err)
		}
		live[h] = tr
		if i%3 == 2 {
			_ = d.Put(h)
			delete(live, h)
		}
	}
	return d, live
}

// FuzzFetch fetches arbitrary handles: never a panic, and either an error or
// exactly the trace stored under that handle.
func FuzzFetch(f *testing.F) {
	d, live := fuzzDepot(f)
	for h := range live {
		f.Add(uint32(h))
		f.Add(uint32(h) + 1<<d.poolBits)
		f.Add(uint32(h) ^ 1<<d.locBits)
		break
	}
	f.Add(uint32(0))
	f.Add(^uint32(0))
	f.Add(uint32(2))
	f.Fuzz(func(t *testing.T, raw uint32) {
		h := Handle(raw)
		got, err := d.Fetch(h, []uint64{7})
		want, ok := live[h]
		if !ok {
			if !errors.Is(err, ErrBadHandle) {
				t.Fatalf("Fetch(%v) = %v, %v; want ErrBadHandle", h, got, err)
			}
			if !slices.Equal(got, []uint64{7}) {
				t.Fatalf("failed Fetch changed dst: %v", got)
			}
			return
		}
		if err != nil || !slices.Equal(got[1:], want) || got[0] != 7 {
			t.Fatalf("Fetch(%v) = %v, %v; want %v", h, got, err, want)
		}
		if err := d.Get(h); err != nil {
			t.Fatal(err)
		}
		if err := d.Put(h); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzSave saves arbitrary traces: the stored trace is the filtered,
// truncated input, saving again gives the same handle, and a one-frame
// change gives a different one.
func FuzzSave(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	f.Add([]byte("0123456789abcdef"), uint8(1))
	f.Add(make([]byte, 8*300), uint8(2))
	f.Add([]byte("01234567\xee\xee\xee\xee\xee\xee\xee\xeeabcdefgh"), uint8(5)) // cut after frame 1
	f.Fuzz(func(t *testing.T, raw []byte, mode uint8) {
		tr := make([]uint64, len(raw)/8)
		for i := range tr {
			tr[i] = binary.LittleEndian.Uint64(raw[8*i:])
		}
		entry := func(pc uint64) bool { return pc>>56 == 0xee }
		d := mustNew(t, Config{MaxFrames: 1 + int(mode)%MaxFramesLimit, Filter: entry})
		want := tr
		for i, pc := range want {
			if entry(pc) {
				want = want[:i+1]
				break
			}
		}
		want = want[:min(len(want), d.maxFrames)]
		flags := Flags(mode>>7) * FlagGet
		h, err := d.SaveFlags(tr, flags)
		if len(want) == 0 {
			if h != 0 || !errors.Is(err, ErrEmpty) {
				t.Fatalf("empty trace: %v, %v", h, err)
			}
			return
		}
		if err != nil || h == 0 {
			t.Fatalf("Save: %v, %v", h, err)
		}
		got, err := d.Fetch(h, nil)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("Fetch = %v, %v; want %v", got, err, want)
		}
		// Saved as its producer would cut it (FlagFiltered), the trace
		// gets the same handle; the input uncut, saved as filtered, is
		// refused unless the filter would leave it (truncated) whole.
		if h4, err := d.SaveFlags(want, flags|FlagFiltered); h4 != h || err != nil {
			t.Fatalf("the cut trace saved as filtered: %v, %v; want %v", h4, err, h)
		}
		whole := tr[:min(len(tr), d.maxFrames)]
		h5, err := d.SaveFlags(tr, flags|FlagFiltered)
		if cutWhole := len(want) == len(whole); cutWhole != (err == nil) || cutWhole && h5 != h || !cutWhole && !errors.Is(err, ErrNotFiltered) {
			t.Fatalf("the uncut trace saved as filtered: %v, %v (the filter leaves it whole: %v)", h5, err, cutWhole)
		}
		pcs := make([]uintptr, len(tr))
		for i, v := range tr {
			pcs[i] = uintptr(v)
		}
		if h2, err := d.SavePCsFlags(pcs, flags); h2 != h || err != nil {
			if unsafe.Sizeof(uintptr(0)) == 8 { // 64-bit uintptr: same values
				t.Fatalf("resave as uintptr: %v, %v; want %v", h2, err, h)
			}
		}
		other := slices.Clone(want)
		other[len(other)-1] ^= 1
		if entry(other[len(other)-1]) != entry(want[len(want)-1]) {
			return
		}
		if h3, err := d.SaveFlags(other, flags); err != nil || h3 == h {
			t.Fatalf("different trace got %v, %v (first %v)", h3, err, h)
		}
		if got, _ := d.Fetch(h, nil); !slices.Equal(got, want) {
			t.Fatalf("first trace changed to %v", got)
		}
	})
}
