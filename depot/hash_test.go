package depot

import (
	"errors"
	"slices"
	"testing"
)

// hashOf is a producer's hash of tr: Start, then Add of every frame.
func hashOf(k HashKey, tr []uint64) Hash {
	h := k.Start()
	for _, pc := range tr {
		h = k.Add(h, pc)
	}
	return h
}

// TestSaveHashedIsSave checks that a producer's hash saves where Save does:
// the same handle whichever call stored the trace first, for []uint64 and
// []uintptr, and that Sum is the producer's frame-by-frame hash.
func TestSaveHashedIsSave(t *testing.T) {
	d := mustNew(t, Config{})
	k := d.HashKey()
	if k.Mul&1 == 0 {
		t.Fatalf("HashKey %+v: even multiplier", k)
	}
	trs := genTraces(200, 32, 7)
	for i, tr := range trs {
		tr = tr[:1+i%32]
		if k.Sum(tr) != hashOf(k, tr) {
			t.Fatalf("trace %d: Sum %#x, frame by frame %#x", i, k.Sum(tr), hashOf(k, tr))
		}
		var a, b Handle
		var err error
		if i%2 == 0 {
			a = d.mustSave(t, tr)
			b, err = d.SaveHashed(tr, hashOf(k, tr))
		} else {
			b, err = d.SaveHashed(tr, hashOf(k, tr))
			a = d.mustSave(t, tr)
		}
		if err != nil || a != b {
			t.Fatalf("trace %d: Save %v, SaveHashed %v, %v", i, a, b, err)
		}
		pcs := make([]uintptr, len(tr))
		for j, pc := range tr {
			pcs[j] = uintptr(pc)
		}
		if c, err := d.SavePCsHashed(pcs, hashOf(k, tr)); err != nil || c != a {
			t.Fatalf("trace %d: SavePCsHashed %v, %v; Save %v", i, c, err, a)
		}
		if got := mustFetch(t, d, a); !slices.Equal(got, tr) {
			t.Fatalf("trace %d: fetched %x, saved %x", i, got, tr)
		}
	}
	if s := d.Stats(); s.InUse != len(trs) {
		t.Fatalf("%d records for %d traces", s.InUse, len(trs))
	}
	// Another depot has another key.
	if e := mustNew(t, Config{}).HashKey(); e == k {
		t.Fatalf("two depots share the key %+v", k)
	}
}

// TestSaveHashedWrongHash checks that a hash that is not the trace's never
// stores it: a new trace is refused with ErrHash, and so is a stored one
// (its lookup under the wrong hash misses, so the miss path checks it).
func TestSaveHashedWrongHash(t *testing.T) {
	d := mustNew(t, Config{})
	k := d.HashKey()
	trs := genTraces(2, 16, 9)
	if _, err := d.SaveHashed(trs[0], hashOf(k, trs[0])^1); !errors.Is(err, ErrHash) {
		t.Fatalf("new trace, wrong hash: %v, want ErrHash", err)
	}
	if s := d.Stats(); s.InUse != 0 {
		t.Fatalf("a wrong hash stored %d records", s.InUse)
	}
	d.mustSave(t, trs[1])
	if _, err := d.SaveHashed(trs[1], hashOf(k, trs[0])); !errors.Is(err, ErrHash) {
		t.Fatalf("stored trace, another trace's hash: %v, want ErrHash", err)
	}
	// A hash from another depot is wrong here too.
	other := mustNew(t, Config{}).HashKey()
	if _, err := d.SaveHashed(trs[0], hashOf(other, trs[0])); !errors.Is(err, ErrHash) {
		t.Fatalf("another depot's hash: %v, want ErrHash", err)
	}
	if s := d.Stats(); s.InUse != 1 {
		t.Fatalf("%d records, want 1", s.InUse)
	}
}

// TestSaveHashedShortened checks that a trace the depot shortens (MaxFrames,
// Filter) is hashed again by the depot: the producer's hash was of the
// whole trace.
func TestSaveHashedShortened(t *testing.T) {
	tr := genTraces(1, 32, 11)[0]
	for _, cfg := range []Config{
		{MaxFrames: 8},
		{Filter: func(pc uint64) bool { return pc == tr[5] }},
	} {
		d := mustNew(t, cfg)
		k := d.HashKey()
		h, err := d.SaveHashed(tr, hashOf(k, tr))
		if err != nil {
			t.Fatal(err)
		}
		want := tr[:8]
		if cfg.Filter != nil {
			want = tr[:6]
		}
		if got := mustFetch(t, d, h); !slices.Equal(got, want) {
			t.Fatalf("%+v: stored %x, want %x", cfg, got, want)
		}
		if h2 := d.mustSave(t, tr); h2 != h {
			t.Fatalf("Save %v, SaveHashed %v", h2, h)
		}
	}
}

// TestCollidingTraces builds a trace set that collides in the primary hash
// (ForceCollisions: every trace of one length has one hash) and checks the
// bound: every trace is stored once and found again, at most maxSameKey
// records are stored under the shared key, and a lookup compares at most
// maxSameKey+1 records (the crowd, then the one under its secondary hash),
// however many traces collide.
func TestCollidingTraces(t *testing.T) {
	for _, flags := range []Flags{0, FlagGet} {
		d := mustNew(t, Config{})
		ForceCollisions(d)
		k := d.HashKey()
		const n = 2000
		trs := genTraces(n, 32, 13)
		if k.Sum(trs[0]) != k.Sum(trs[1]) {
			t.Fatal("ForceCollisions did not make two traces collide")
		}
		hs := make([]Handle, n)
		seen := map[Handle]bool{}
		for i, tr := range trs {
			h, err := d.SaveHashedFlags(tr, hashOf(k, tr), flags)
			if err != nil {
				t.Fatal(err)
			}
			if seen[h] {
				t.Fatalf("trace %d: handle %v given twice", i, h)
			}
			seen[h], hs[i] = true, h
		}
		if got := Secondaries(d); int(got) != n-maxSameKey {
			t.Fatalf("%d traces under the secondary hash, want %d", got, n-maxSameKey)
		}
		cmp, stop := CountCompares()
		worst := 0
		for i, tr := range trs {
			*cmp = 0
			h, err := d.SaveHashedFlags(tr, hashOf(k, tr), flags)
			if err != nil || h != hs[i] {
				t.Fatalf("trace %d saved again: %v, %v; first %v", i, h, err, hs[i])
			}
			worst = max(worst, *cmp)
			if got := mustFetch(t, d, h); !slices.Equal(got, tr) {
				t.Fatalf("trace %d: fetched %x", i, got)
			}
		}
		stop()
		const bound = 5 // SaveHashed's doc: 4, then the one under the secondary hash
		if worst > bound {
			t.Fatalf("a lookup compared %d records, bound %d", worst, bound)
		}
		if flags == 0 {
			continue
		}
		// Evict the crowd under the shared key (two references each now):
		// the traces stored under their secondary hash are still found,
		// not stored twice.
		for i := range maxSameKey {
			for range 2 {
				if err := d.Put(hs[i]); err != nil {
					t.Fatal(err)
				}
			}
		}
		before := d.Stats().InUse
		for i := maxSameKey; i < maxSameKey+50; i++ {
			if h, err := d.SaveHashedFlags(trs[i], hashOf(k, trs[i]), flags); err != nil || h != hs[i] {
				t.Fatalf("trace %d after the crowd left: %v, %v; first %v", i, h, err, hs[i])
			}
		}
		if s := d.Stats(); s.InUse != before {
			t.Fatalf("%d records after saving stored traces again, %d before", s.InUse, before)
		}
	}
}

// TestSaveHashedHitNoAlloc checks that a hit with a producer's hash does not
// allocate.
func TestSaveHashedHitNoAlloc(t *testing.T) {
	d := mustNew(t, Config{})
	k := d.HashKey()
	tr := genTraces(1, 32, 17)[0]
	h := hashOf(k, tr)
	want := d.mustSave(t, tr)
	if a := testing.AllocsPerRun(100, func() {
		if got, err := d.SaveHashed(tr, h); err != nil || got != want {
			t.Fatal(got, err)
		}
	}); a != 0 {
		t.Fatalf("%v allocations a hit", a)
	}
}

// TestLookupHashed checks that LookupHashed finds what Save stored, with
// the producer's hash, and stores nothing on a miss.
func TestLookupHashed(t *testing.T) {
	d := mustNew(t, Config{})
	k := d.HashKey()
	trs := genTraces(3, 20, 19)
	want := d.mustSave(t, trs[0])
	if h, ok := d.LookupHashed(trs[0], hashOf(k, trs[0])); !ok || h != want {
		t.Fatalf("stored trace: %v, %v; want %v", h, ok, want)
	}
	if h, ok := d.LookupHashed(trs[1], hashOf(k, trs[1])); ok {
		t.Fatalf("new trace found: %v", h)
	}
	if h, ok := d.LookupHashed(trs[0], hashOf(k, trs[1])); ok {
		t.Fatalf("stored trace found under another hash: %v", h)
	}
	if s := d.Stats(); s.InUse != 1 {
		t.Fatalf("%d records after lookups, want 1", s.InUse)
	}
	// A refcounted record is not reported (a plain lookup must not pin it).
	r, err := d.SaveFlags(trs[2], FlagGet)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := d.LookupHashed(trs[2], hashOf(k, trs[2])); ok {
		t.Fatalf("refcounted record %v found as %v", r, h)
	}
}

// TestFlagFiltered checks a producer that cuts its trace as the depot's
// Filter would: the save gives the handle Save of the uncut trace gives,
// a hit does not call the filter at all (the producer did), and a new
// trace saved as filtered that the filter would cut shorter is refused
// before anything is stored, by Save and SaveHashed alike.
func TestFlagFiltered(t *testing.T) {
	calls := 0
	entry := EntryText([]uint64{0x100}, []uint64{0x200})
	d, err := New(Config{Filter: func(pc uint64) bool { calls++; return entry(pc) }})
	if err != nil {
		t.Fatal(err)
	}
	if d.Filter() == nil {
		t.Fatal("Filter() is nil")
	}
	full := []uint64{0x1000, 0x1010, 0x150, 0x2000, 0x2010}
	cutTr := full[:3] // through the first frame in [0x100, 0x200)
	k := d.HashKey()
	h1, err := d.Save(full)
	if err != nil {
		t.Fatal(err)
	}
	for _, save := range []func() (Handle, error){
		func() (Handle, error) { return d.SaveHashedFlags(cutTr, hashOf(k, cutTr), FlagFiltered) },
		func() (Handle, error) { return d.SaveFlags(cutTr, FlagFiltered) },
	} {
		calls = 0
		if h, err := save(); h != h1 || err != nil {
			t.Errorf("filtered save: %v, %v; Save of the uncut trace: %v", h, err, h1)
		}
		if calls != 0 {
			t.Errorf("a hit with FlagFiltered called the filter %d times", calls)
		}
	}
	// New traces: one cut as the filter cuts is stored (the filter runs
	// once over it, to check); one the filter would cut shorter is not.
	good := []uint64{0x3000, 0x3010, 0x1f0}
	calls = 0
	h2, err := d.SaveHashedFlags(good, hashOf(k, good), FlagFiltered)
	if err != nil || h2 == 0 || calls != len(good) {
		t.Fatalf("new filtered trace: %v, %v, %d filter calls", h2, err, calls)
	}
	before := d.Stats().InUse
	bad := []uint64{0x4000, 0x180, 0x4010}
	if _, err := d.SaveHashedFlags(bad, hashOf(k, bad), FlagFiltered); !errors.Is(err, ErrNotFiltered) {
		t.Errorf("SaveHashedFlags of an uncut trace as filtered: %v, want ErrNotFiltered", err)
	}
	if _, err := d.SaveFlags(bad, FlagFiltered); !errors.Is(err, ErrNotFiltered) {
		t.Errorf("SaveFlags of an uncut trace as filtered: %v, want ErrNotFiltered", err)
	}
	if after := d.Stats().InUse; after != before {
		t.Errorf("refused traces stored: %d records, were %d", after, before)
	}
	// Without a filter the flag changes nothing.
	d2, _ := New(Config{})
	if h, err := d2.SaveFlags(bad, FlagFiltered); err != nil || h == 0 {
		t.Errorf("FlagFiltered without a Filter: %v, %v", h, err)
	}
}
