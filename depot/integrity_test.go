package depot

import (
	"errors"
	"slices"
	"testing"
)

// fill returns a distinct 4-frame trace for i (one size class for every i).
func fill(i int) []uint64 { return []uint64{0xf000 + uint64(i), 1, 2, 3} }

// cycleSlot evicts the refcounted record h and reuses its slot reuses times
// with fresh traces, the last of which is last (kept with one reference).
// The freelist holds only that slot, so every save reuses it. It returns the
// handle of the last incarnation.
func cycleSlot(t *testing.T, d *Depot, h Handle, reuses int, last []uint64) Handle {
	t.Helper()
	if err := d.Put(h); err != nil {
		t.Fatalf("Put(%v): %v", h, err)
	}
	var cur Handle
	for i := range reuses {
		tr := fill(1000000 + i)
		if i == reuses-1 {
			tr = last
		}
		var err error
		if cur, err = d.SaveFlags(tr, FlagGet); err != nil {
			t.Fatalf("reuse %d: %v", i, err)
		}
		if i < reuses-1 {
			if err := d.Put(cur); err != nil {
				t.Fatalf("reuse %d: Put: %v", i, err)
			}
		}
	}
	return cur
}

// TestHitNeverValidatesReusedSlot: a lock-free Save hit that pauses after
// comparing frames while its record is evicted and the slot reused (as
// often as it takes for a short generation to come round) must not return
// the slot's new trace, nor take a reference on it.
func TestHitNeverValidatesReusedSlot(t *testing.T) {
	a := []uint64{0xa1, 0xa2, 0xa3, 0xa4}
	b := []uint64{0xb1, 0xb2, 0xb3, 0xb4}
	for _, cfg := range []Config{{}, {MaxPools: MaxPoolsLimit}} {
		for _, reuses := range []int{1, 32, 1024, 2048} {
			d := mustNew(t, cfg)
			hA, err := d.SaveFlags(a, FlagGet)
			if err != nil {
				t.Fatal(err)
			}
			var hB Handle
			testHookAfterRead = func() {
				testHookAfterRead = nil // the hook's own saves must not recurse
				hB = cycleSlot(t, d, hA, reuses, b)
			}
			h, err := d.SaveFlags(a, FlagGet)
			testHookAfterRead = nil
			if err != nil {
				t.Fatalf("MaxPools %d, %d reuses: SaveFlags(a): %v", cfg.MaxPools, reuses, err)
			}
			if got := mustFetch(t, d, h); !slices.Equal(got, a) {
				t.Fatalf("MaxPools %d, %d reuses: SaveFlags(a) = %v (b's is %v) fetches %#x, want a %#x",
					cfg.MaxPools, reuses, h, hB, got, a)
			}
			// b has exactly the one reference cycleSlot took.
			if err := d.Put(hB); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Fetch(hB, nil); !errors.Is(err, ErrBadHandle) {
				t.Fatalf("MaxPools %d, %d reuses: b still live after its only Put: the hit took a reference on it", cfg.MaxPools, reuses)
			}
		}
	}
}

// TestStaleHandleAfterReuses: the handle of an evicted record must stay
// rejected while its slot is reused, for at least 1,023 reuses at the
// default configuration.
func TestStaleHandleAfterReuses(t *testing.T) {
	a := []uint64{0xa1, 0xa2, 0xa3, 0xa4}
	d := mustNew(t, Config{})
	hA, err := d.SaveFlags(a, FlagGet)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Put(hA); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 1023; k++ {
		h, err := d.SaveFlags(fill(k), FlagGet)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := d.Fetch(hA, nil); err == nil {
			t.Fatalf("after %d reuses of its slot the stale handle %v is accepted and fetches %#x (the new record is %v)", k, hA, got, h)
		}
		if err := d.Put(h); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFreedSpaceServesAnySize: space freed by evicted records serves a
// later record of another size.
func TestFreedSpaceServesAnySize(t *testing.T) {
	d := mustNew(t, Config{MaxPools: 1})
	var hs []Handle
	for i := 0; ; i++ {
		h, err := d.SaveFlags([]uint64{0x1000 + uint64(i)}, FlagGet)
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		if err := d.Put(h); err != nil {
			t.Fatal(err)
		}
	}
	if st := d.Stats(); st.InUse != 0 {
		t.Fatalf("after every Put: %+v", st)
	}
	for _, flags := range []Flags{0, FlagGet} {
		tr := []uint64{7, 8, 9 + uint64(flags)}
		h, err := d.SaveFlags(tr, flags)
		if err != nil {
			t.Fatalf("%d freed 1-frame records, a 3-frame SaveFlags(%d): %v", len(hs), flags, err)
		}
		if got := mustFetch(t, d, h); !slices.Equal(got, tr) {
			t.Fatalf("fetched %v", got)
		}
	}
}

// TestUnknownFlags: flag bits that mean nothing are an error, and nothing
// is stored.
func TestUnknownFlags(t *testing.T) {
	d := mustNew(t, Config{})
	for _, f := range []Flags{1 << 3, 1 << 31, FlagGet | 1<<5, FlagFiltered | 1<<4} {
		h, err := d.SaveFlags([]uint64{1, 2, 3}, f)
		if err == nil || h != 0 {
			t.Errorf("SaveFlags with flags %#x = %v, %v; want an error", uint32(f), h, err)
		}
		if _, err := d.SavePCsFlags([]uintptr{1, 2, 3}, f); err == nil {
			t.Errorf("SavePCsFlags with flags %#x: no error", uint32(f))
		}
	}
	if st := d.Stats(); st.InUse != 0 || st.Misses != 0 {
		t.Fatalf("a refused save stored something: %+v", st)
	}
}

// TestZeroDepot: a zero Depot works with the default configuration.
func TestZeroDepot(t *testing.T) {
	var d Depot
	tr := []uint64{0xffff800080123450, 0xffff800080234560}
	if _, err := d.Fetch(1, nil); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("Fetch on an empty zero Depot: %v", err)
	}
	h, err := d.Save(tr)
	if err != nil {
		t.Fatalf("Save on a zero Depot: %v", err)
	}
	if h2, err := d.Save(tr); h2 != h || err != nil {
		t.Fatalf("second Save = %v, %v; want %v", h2, err, h)
	}
	if got := mustFetch(t, &d, h); !slices.Equal(got, tr) {
		t.Fatalf("Fetch = %#x", got)
	}
	if st := d.Stats(); st.InUse != 1 || st.Hits != 0 || st.Misses != 1 { // a zero Depot counts no hits without the lock
		t.Fatalf("stats %+v", st)
	}
}

// TestPersistentRules checks each documented rule for persistent records,
// and that Stats counts pins.
func TestPersistentRules(t *testing.T) {
	tr := []uint64{0x10, 0x20, 0x30}
	// setRefs forces the reference count of the live refcounted record h.
	setRefs := func(t *testing.T, d *Depot, h Handle, refs uint64) {
		p, off, st, err := d.resolve(h)
		if err != nil || st&stPersistent != 0 {
			t.Fatalf("resolve(%v): %v, state %#x", h, err, st)
		}
		p[off+1] = st&^stRefMask | refs
	}
	tests := []struct {
		name   string
		setup  func(t *testing.T, d *Depot) Handle // returns the handle under test
		pinned uint64
	}{
		{"plain Save of a refcounted trace pins it", func(t *testing.T, d *Depot) Handle {
			h, _ := d.SaveFlags(tr, FlagGet)
			if h2, err := d.Save(tr); h2 != h || err != nil {
				t.Fatalf("Save of the refcounted trace = %v, %v; want %v", h2, err, h)
			}
			return h
		}, 1},
		{"Put on a persistent record does nothing", func(t *testing.T, d *Depot) Handle {
			h, _ := d.Save(tr)
			for range 3 {
				if err := d.Put(h); err != nil {
					t.Fatal(err)
				}
			}
			return h
		}, 0},
		{"Get on a persistent record does nothing", func(t *testing.T, d *Depot) Handle {
			h, _ := d.Save(tr)
			if err := d.Get(h); err != nil {
				t.Fatal(err)
			}
			return h
		}, 0},
		{"SaveFlags(FlagGet) of a persistent trace takes no reference", func(t *testing.T, d *Depot) Handle {
			h, _ := d.Save(tr)
			if h2, err := d.SaveFlags(tr, FlagGet); h2 != h || err != nil {
				t.Fatalf("SaveFlags = %v, %v; want %v", h2, err, h)
			}
			return h
		}, 0},
		{"Get at MaxRefs pins", func(t *testing.T, d *Depot) Handle {
			h, _ := d.SaveFlags(tr, FlagGet)
			setRefs(t, d, h, MaxRefs)
			if err := d.Get(h); err != nil {
				t.Fatal(err)
			}
			return h
		}, 1},
		{"SaveFlags(FlagGet) at MaxRefs pins", func(t *testing.T, d *Depot) Handle {
			h, _ := d.SaveFlags(tr, FlagGet)
			setRefs(t, d, h, MaxRefs)
			if h2, err := d.SaveFlags(tr, FlagGet); h2 != h || err != nil {
				t.Fatalf("SaveFlags = %v, %v; want %v", h2, err, h)
			}
			return h
		}, 1},
		{"Get below MaxRefs does not pin", func(t *testing.T, d *Depot) Handle {
			h, _ := d.SaveFlags(tr, FlagGet)
			setRefs(t, d, h, MaxRefs-1)
			if err := d.Get(h); err != nil {
				t.Fatal(err)
			}
			setRefs(t, d, h, 1)
			return h
		}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := mustNew(t, Config{})
			h := tc.setup(t, d)
			st := d.Stats()
			if st.Pinned != tc.pinned {
				t.Fatalf("Stats.Pinned = %d, want %d", st.Pinned, tc.pinned)
			}
			wantPersistent := tc.pinned > 0 || st.Refcounted == 0
			if wantPersistent && (st.Persistent != 1 || st.Refcounted != 0) {
				t.Fatalf("stats %+v, want one persistent record", st)
			}
			// However many Puts follow, a persistent record stays; a
			// refcounted one (one reference) is evicted by the first.
			for range 3 {
				if err := d.Put(h); err != nil && wantPersistent {
					t.Fatalf("Put: %v", err)
				}
			}
			got, err := d.Fetch(h, nil)
			if wantPersistent && (err != nil || !slices.Equal(got, tr)) {
				t.Fatalf("persistent record after Puts: %v, %v", got, err)
			}
			if !wantPersistent && !errors.Is(err, ErrBadHandle) {
				t.Fatalf("refcounted record survived its Put: %v, %v", got, err)
			}
			if st := d.Stats(); wantPersistent && st.Evictions != 0 {
				t.Fatalf("persistent record evicted: %+v", st)
			}
		})
	}
}
