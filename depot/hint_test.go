package depot

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// sharedKeyTraces returns n distinct 48-frame traces with one hint key:
// they differ only in frame 40, which hintKey does not read.
func sharedKeyTraces(t *testing.T, d *Depot, n int) [][]uint64 {
	t.Helper()
	base := genTraces(1, 48, 5)[0]
	var out [][]uint64
	for i := range n {
		tr := slices.Clone(base)
		tr[40] += uint64(i+1) * 0x40
		out = append(out, tr)
	}
	k := hintKey(out[0], d.hkey.Seed)
	for i, tr := range out {
		if hintKey(tr, d.hkey.Seed) != k {
			t.Fatalf("trace %d has another hint key", i)
		}
	}
	return out
}

// saveAll saves trs and returns their handles, each checked against the
// trace it fetches, so that a wrong hint in these first saves fails too.
func saveAll(t *testing.T, d *Depot, trs [][]uint64) []Handle {
	t.Helper()
	hs := make([]Handle, len(trs))
	for i, tr := range trs {
		h, err := d.Save(tr)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := d.Fetch(h, nil); err != nil || !slices.Equal(got, tr) {
			t.Fatalf("trace %d: Save gave %v, which fetches %#x, %v", i, h, got, err)
		}
		hs[i] = h
	}
	return hs
}

// TestHintSameSet: traces whose keys pick one set (with other tags) each
// keep a slot of it: saved in turn, every save after the first finds its
// record by its hint, counted as a hit, and gives its own handle.
func TestHintSameSet(t *testing.T) {
	d := mustNew(t, Config{CountHits: true})
	// Distinct traces until hintWays share a set.
	bySet := map[uint64][][]uint64{}
	var trs [][]uint64
	for _, tr := range genTraces(20000, 32, 5) {
		set, _ := hintSet(hintKey(tr, d.hkey.Seed), len(tr))
		if bySet[set] = append(bySet[set], tr); len(bySet[set]) == hintWays {
			trs = bySet[set]
			break
		}
	}
	if trs == nil {
		t.Fatal("no set of 4 traces")
	}
	want := saveAll(t, d, trs)
	before := d.Stats()
	const rounds = 200
	hinted := 0
	for r := range rounds {
		for i, tr := range trs {
			if h, ok := d.hinted(tr, hintKey(tr, d.hkey.Seed)); ok {
				if h != want[i] {
					t.Fatalf("round %d: the hint of trace %d names %v, want %v", r, i, h, want[i])
				}
				hinted++
			}
			if h, err := d.Save(tr); err != nil || h != want[i] {
				t.Fatalf("round %d: Save of trace %d = %v, %v; want %v", r, i, h, err, want[i])
			}
		}
	}
	after := d.Stats()
	saves := rounds * len(trs)
	// Each hinted call above counted a hit too.
	if got := after.Hits - before.Hits; got != uint64(saves+hinted) {
		t.Errorf("%d hits counted for %d saves and %d hinted lookups", got, saves, hinted)
	}
	if after.Misses != before.Misses {
		t.Errorf("%d misses on known traces", after.Misses-before.Misses)
	}
	if hinted != saves {
		t.Errorf("%d of %d saves found by their hint, want all", hinted, saves)
	}
	if st := d.Stats(); st.HintBytes != hintBytes || hintBytes < 8*hintSlots {
		t.Errorf("HintBytes %d, want %d (at least %d)", st.HintBytes, hintBytes, 8*hintSlots)
	}
}

// TestHintSharedKey: more traces share a key (so a set and a tag) than a
// set has slots. Saved in turn, every save gives its own trace's handle
// (a hint taken for its record without the compare would hand one trace
// another's), the set never holds two slots of the tag (so a save
// compares at most one record by its hint), and a trace saved again and
// again after them keeps the slot and is found by it.
func TestHintSharedKey(t *testing.T) {
	d := mustNew(t, Config{})
	trs := sharedKeyTraces(t, d, 3*hintWays)
	want := saveAll(t, d, trs)
	k := hintKey(trs[0], d.hkey.Seed)
	set, tag := hintSet(k, len(trs[0]))
	for r := range 400 {
		for i, tr := range trs {
			if h, err := d.Save(tr); err != nil || h != want[i] {
				t.Fatalf("round %d: Save of trace %d = %v, %v; want %v", r, i, h, err, want[i])
			}
			same := 0
			for j := range hintWays {
				if d.hints.Load().slots[set+uint64(j)].Load()>>hintNShift == tag {
					same++
				}
			}
			if same > 1 {
				t.Fatalf("round %d, trace %d: %d slots of one tag", r, i, same)
			}
		}
	}
	for range 100 {
		d.Save(trs[5])
	}
	hinted := 0
	for range 100 {
		if h, ok := d.hinted(trs[5], k); ok && h == want[5] {
			hinted++
		}
	}
	if hinted != 100 {
		t.Errorf("a trace saved again and again: %d of 100 found by the hint, want all", hinted)
	}
}

// TestHintOnlyPersistent: a refcounted record is never a hint. Evicted
// and stored again (the same slot, a new generation), its trace must not
// be found under the old handle; pinned by a plain Save, it becomes one.
func TestHintOnlyPersistent(t *testing.T) {
	d := mustNew(t, Config{})
	tr := genTraces(1, 32, 9)[0]
	h1, err := d.SaveFlags(tr, FlagGet)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Put(h1); err != nil {
		t.Fatal(err)
	}
	h2, err := d.SaveFlags(tr, FlagGet)
	if err != nil {
		t.Fatal(err)
	}
	if h2 == h1 {
		t.Fatalf("the evicted record's handle %v came back", h1)
	}
	h3, err := d.Save(tr) // pins h2's record
	if err != nil || h3 != h2 {
		t.Fatalf("plain Save of the refcounted trace = %v, %v; want %v", h3, err, h2)
	}
	if _, err := d.Fetch(h3, nil); err != nil {
		t.Fatal(err)
	}
	if h, ok := d.hinted(tr, hintKey(tr, d.hkey.Seed)); !ok || h != h2 {
		t.Fatalf("the pinned record's hint = %v, %v; want %v", h, ok, h2)
	}
	if err := d.Put(h1); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("Put of the evicted handle: %v", err)
	}
}

// TestHintConcurrent saves traces that crowd one hint set from 4
// goroutines, each in its own order, so that slots are moved while other
// goroutines read them. Every save must give its trace's handle from a
// single-goroutine save (a mixed or wrong hint shows as a wrong handle),
// and the hits must add up (run under -race too).
func TestHintConcurrent(t *testing.T) {
	d := mustNew(t, Config{CountHits: true})
	trs := sharedKeyTraces(t, d, 2*hintWays)
	trs = append(trs, genTraces(8, 32, 11)...) // sets of their own
	want := saveAll(t, d, trs)
	before := d.Stats()
	const workers, per = 4, 3000
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range per {
				i := (j*(2*w+1) + w) % len(trs)
				if h, err := d.Save(trs[i]); err != nil || h != want[i] {
					errs <- fmt.Errorf("worker %d save %d: trace %d gave %v, %v; want %v", w, j, i, h, err, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := d.Stats()
	if got := after.Hits - before.Hits; got != workers*per || after.Misses != before.Misses {
		t.Errorf("%d hits and %d misses for %d saves of known traces", got, after.Misses-before.Misses, workers*per)
	}
}

// TestHintsOnFirstPlainSave: a depot saved only with a producer's hash
// (a stackid.Table's) never allocates hints; its first plain save does.
func TestHintsOnFirstPlainSave(t *testing.T) {
	d := mustNew(t, Config{})
	k := d.HashKey()
	trs := genTraces(100, 32, 13)
	for _, tr := range trs {
		if _, err := d.SaveHashed(tr, k.Sum(tr)); err != nil {
			t.Fatal(err)
		}
		if _, ok := d.LookupHashed(tr, k.Sum(tr)); !ok {
			t.Fatal("a saved trace not found")
		}
	}
	if st := d.Stats(); st.HintBytes != 0 || d.hints.Load() != nil {
		t.Fatalf("hints allocated without a plain save: HintBytes %d", st.HintBytes)
	}
	want, _ := d.SaveHashed(trs[0], k.Sum(trs[0]))
	if h, err := d.Save(trs[0]); err != nil || h != want {
		t.Fatalf("Save = %v, %v; want %v", h, err, want)
	}
	if st := d.Stats(); st.HintBytes != hintBytes {
		t.Fatalf("HintBytes %d after a plain save, want %d", st.HintBytes, hintBytes)
	}
	if h, ok := d.hinted(trs[0], hintKey(trs[0], d.hkey.Seed)); !ok || h != want {
		t.Fatalf("the plain save's hint = %v, %v; want %v", h, ok, want)
	}
}

// TestHintsFirstSavesConcurrent: 4 goroutines make a depot's first plain
// saves at once, so their learns race to allocate the hints (run under
// -race too). Each trace must keep its handle. Two learns into one set at
// once may take the same empty slot, so a few hints may be lost then,
// but one more pass of saves must leave every trace found by its hint.
func TestHintsFirstSavesConcurrent(t *testing.T) {
	for round := range 20 {
		d := mustNew(t, Config{})
		trs := genTraces(4*32, 32, uint64(100+round))
		k := d.HashKey()
		want := make([]Handle, len(trs))
		for i, tr := range trs {
			want[i], _ = d.SaveHashed(tr, k.Sum(tr)) // stored, no hints yet
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []string
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(trs); i += 4 {
					if h, err := d.Save(trs[i]); err != nil || h != want[i] {
						mu.Lock()
						errs = append(errs, fmt.Sprintf("trace %d: %v, %v; want %v", i, h, err, want[i]))
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("round %d: %v", round, errs)
		}
		lost := 0
		for i, tr := range trs {
			if h, ok := d.hinted(tr, hintKey(tr, d.hkey.Seed)); !ok {
				lost++
			} else if h != want[i] {
				t.Fatalf("round %d: the hint of trace %d names %v, want %v", round, i, h, want[i])
			}
		}
		if lost > len(trs)/8 {
			t.Fatalf("round %d: %d of %d traces lost their hints in the first saves", round, lost, len(trs))
		}
		for i, tr := range trs {
			d.Save(tr)
			if h, ok := d.hinted(tr, hintKey(tr, d.hkey.Seed)); !ok || h != want[i] {
				t.Fatalf("round %d: trace %d not found by its hint after another save (%v, %v)", round, i, h, ok)
			}
		}
	}
}
