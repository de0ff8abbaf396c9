package depot

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/unwindkit/unwindkit/internal/tracegen"
)

// genTraces returns n distinct kernel-like traces of depth frames,
// deterministic in seed (the generator of the package's benchmarks too).
func genTraces(n, depth int, seed uint64) [][]uint64 { return tracegen.Kernel(n, depth, seed) }

func u64bytes(t []uint64) []byte {
	b := make([]byte, 0, 8*len(t))
	for _, v := range t {
		for i := range 8 {
			b = append(b, byte(v>>(8*i)))
		}
	}
	return b
}

func mustNew(t testing.TB, cfg Config) *Depot {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return d
}

func mustFetch(t testing.TB, d *Depot, h Handle) []uint64 {
	t.Helper()
	got, err := d.Fetch(h, nil)
	if err != nil {
		t.Fatalf("Fetch(%v): %v", h, err)
	}
	return got
}

func TestNewConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"max frames limit", Config{MaxFrames: MaxFramesLimit}, true},
		{"too many frames", Config{MaxFrames: MaxFramesLimit + 1}, false},
		{"negative frames", Config{MaxFrames: -1}, false},
		{"max pools limit", Config{MaxPools: MaxPoolsLimit}, true},
		{"too many pools", Config{MaxPools: MaxPoolsLimit + 1}, false},
		{"negative pools", Config{MaxPools: -1}, false},
		{"one bucket", Config{Buckets: 1}, true},
		{"buckets not power of two", Config{Buckets: 3}, false},
		{"negative buckets", Config{Buckets: -4}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("New(%+v) error = %v, want ok=%v", tc.cfg, err, tc.ok)
			}
			if d != nil && d.maxFrames == 0 {
				t.Fatal("MaxFrames default not applied")
			}
		})
	}
}

func TestDedup(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		a, b   []uint64
		same   bool
		stored []uint64 // what Fetch(a's handle) returns
	}{
		{"identical", Config{}, []uint64{1, 2, 3}, []uint64{1, 2, 3}, true, []uint64{1, 2, 3}},
		{"one frame differs", Config{}, []uint64{1, 2, 3}, []uint64{1, 2, 4}, false, []uint64{1, 2, 3}},
		{"prefix", Config{}, []uint64{1, 2, 3}, []uint64{1, 2}, false, []uint64{1, 2, 3}},
		{"longer", Config{}, []uint64{1, 2}, []uint64{1, 2, 0}, false, []uint64{1, 2}},
		{"zero frames differ in count", Config{}, []uint64{0}, []uint64{0, 0}, false, []uint64{0}},
		{"reordered", Config{}, []uint64{1, 2}, []uint64{2, 1}, false, []uint64{1, 2}},
		{"truncated to MaxFrames", Config{MaxFrames: 2}, []uint64{1, 2, 3}, []uint64{1, 2, 4}, true, []uint64{1, 2}},
		{"filter cuts after entry", Config{Filter: EntryText([]uint64{100}, []uint64{200})},
			[]uint64{1, 150, 3, 4}, []uint64{1, 150, 9}, true, []uint64{1, 150}},
		{"filter no entry frame", Config{Filter: EntryText([]uint64{100}, []uint64{200})},
			[]uint64{1, 2, 3}, []uint64{1, 2, 4}, false, []uint64{1, 2, 3}},
		{"filter entry frame innermost", Config{Filter: EntryText([]uint64{100, 500}, []uint64{200, 600})},
			[]uint64{500, 2}, []uint64{500, 3}, true, []uint64{500}},
		{"max frame values", Config{}, []uint64{^uint64(0), 1 << 63}, []uint64{^uint64(0), 1 << 63}, true, []uint64{^uint64(0), 1 << 63}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.CountHits = true
			d := mustNew(t, cfg)
			ha, err := d.Save(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			hb, err := d.Save(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if ha == 0 || hb == 0 {
				t.Fatalf("zero handle: %v %v", ha, hb)
			}
			if (ha == hb) != tc.same {
				t.Fatalf("handles %v and %v: same=%v, want %v", ha, hb, ha == hb, tc.same)
			}
			if got := mustFetch(t, d, ha); !slices.Equal(got, tc.stored) {
				t.Fatalf("Fetch = %v, want %v", got, tc.stored)
			}
			st := d.Stats()
			wantMiss := uint64(2)
			if tc.same {
				wantMiss = 1
			}
			if st.Misses != wantMiss || st.Hits != 2-wantMiss || st.InUse != int(wantMiss) || st.Persistent != int(wantMiss) {
				t.Fatalf("stats %+v, want %d misses", st, wantMiss)
			}
		})
	}
}

func TestUintptrAndUint64Agree(t *testing.T) {
	d := mustNew(t, Config{})
	h1, err := d.Save([]uint64{0x1000, 0x2000, 0x3000})
	if err != nil {
		t.Fatal(err)
	}
	h2, err := d.SavePCs([]uintptr{0x1000, 0x2000, 0x3000})
	if err != nil {
		t.Fatal(err)
	}
	if h1 != h2 {
		t.Fatalf("uint64 handle %v, uintptr handle %v", h1, h2)
	}
	pcs, err := d.FetchPCs(h1, []uintptr{7})
	if err != nil || !slices.Equal(pcs, []uintptr{7, 0x1000, 0x2000, 0x3000}) {
		t.Fatalf("FetchPCs = %v, %v", pcs, err)
	}
}

func TestEmptyTrace(t *testing.T) {
	d := mustNew(t, Config{})
	for _, tr := range [][]uint64{nil, {}} {
		if h, err := d.Save(tr); h != 0 || !errors.Is(err, ErrEmpty) {
			t.Fatalf("Save(%v) = %v, %v; want 0, ErrEmpty", tr, h, err)
		}
	}
}

// parts splits h by d's handle layout: pool index, 16-byte unit, generation.
func parts(d *Depot, h Handle) (pool, unit, gen uint32) {
	return uint32(h) & d.poolMask, uint32(h) >> d.poolBits & (1<<offsetBits - 1), uint32(h) >> d.locBits
}

func mkHandle(d *Depot, pool, unit, gen uint32) Handle {
	return Handle(pool | unit<<d.poolBits | gen<<d.locBits)
}

// TestHandleLayout checks the split of the 32 handle bits for several
// configurations (P = ceil(log2(MaxPools)) pool bits, 12 offset bits,
// G = 20 - P generation bits) and where records land.
func TestHandleLayout(t *testing.T) {
	for _, tc := range []struct {
		maxPools   int
		pool, gen  uint
		staleBound int // reuses for which a stale handle is rejected
	}{
		{0, 9, 11, 2047},
		{1, 0, 20, 1<<20 - 1},
		{2, 1, 19, 1<<19 - 1},
		{3, 2, 18, 1<<18 - 1},
		{512, 9, 11, 2047},
		{513, 10, 10, 1023},
		{MaxPoolsLimit, 15, 5, 31},
	} {
		d := mustNew(t, Config{MaxPools: tc.maxPools})
		if d.poolBits != tc.pool || 32-d.locBits != tc.gen || d.locBits != tc.pool+offsetBits || int(d.genMask) != tc.staleBound {
			t.Errorf("MaxPools %d: pool bits %d, generation bits %d (mask %d); want %d, %d",
				tc.maxPools, d.poolBits, 32-d.locBits, d.genMask, tc.pool, tc.gen)
		}
		// 3 frames → 5 words → 6 words (3 units) per record; the first
		// record follows the 512-byte bitmap (32 units).
		for i := range 3 {
			h, err := d.Save([]uint64{uint64(i), 1, 2})
			if err != nil {
				t.Fatal(err)
			}
			if p, u, g := parts(d, h); p != 0 || u != uint32(32+3*i) || g != 0 {
				t.Errorf("MaxPools %d: record %d at pool %d unit %d gen %d, want 0 %d 0", tc.maxPools, i, p, u, g, 32+3*i)
			}
		}
	}
	if got, want := Handle(0x1234).String(), "0x00001234"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestBadHandles(t *testing.T) {
	d := mustNew(t, Config{MaxPools: 3})
	h, err := d.Save([]uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	hr, err := d.SaveFlags([]uint64{4, 5, 6}, FlagGet)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Put(hr); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		h      Handle
		reason string
	}{
		{"zero", 0, "zero handle"},
		{"pool not allocated", mkHandle(d, 1, 32, 0), "no such pool"},
		{"pool beyond limit", mkHandle(d, 3, 32, 0), "no such pool"},
		{"pool field max", h | Handle(d.poolMask), "no such pool"},
		{"middle of record", h + 1<<d.poolBits, "not the start of a record"},
		{"past the records", mkHandle(d, 0, 4000, 0), "not the start of a record"},
		{"the bitmap", mkHandle(d, 0, 0, 1), "not the start of a record"},
		{"last unit", mkHandle(d, 0, 1<<offsetBits-1, 0), "not the start of a record"},
		{"wrong generation", h ^ 1<<d.locBits, "stale generation"},
		{"top generation bit", h ^ 1<<31, "stale generation"},
		{"evicted", hr, "stale generation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := []uint64{42}
			got, err := d.Fetch(tc.h, dst)
			var he *HandleError
			if !errors.Is(err, ErrBadHandle) || !errors.As(err, &he) || he.Reason != tc.reason || he.Handle != tc.h {
				t.Fatalf("Fetch(%v) error %v, want reason %q", tc.h, err, tc.reason)
			}
			if !slices.Equal(got, []uint64{42}) {
				t.Fatalf("Fetch changed dst to %v", got)
			}
			if err := d.Get(tc.h); !errors.Is(err, ErrBadHandle) {
				t.Fatalf("Get: %v", err)
			}
			if err := d.Put(tc.h); !errors.Is(err, ErrBadHandle) {
				t.Fatalf("Put: %v", err)
			}
			if _, err := d.Len(tc.h); !errors.Is(err, ErrBadHandle) {
				t.Fatalf("Len: %v", err)
			}
		})
	}
	if n, err := d.Len(h); n != 3 || err != nil {
		t.Fatalf("Len(valid) = %d, %v", n, err)
	}
}

func TestRefcountEvictReuse(t *testing.T) {
	tr := []uint64{10, 20, 30, 40}
	other := []uint64{11, 21, 31} // another length: any freed record fits
	d := mustNew(t, Config{})

	h1, _ := d.SaveFlags(tr, FlagGet)
	h2, _ := d.SaveFlags(tr, FlagGet)
	if h1 != h2 {
		t.Fatalf("FlagGet saves of one trace gave %v and %v", h1, h2)
	}
	if err := d.Get(h1); err != nil { // three references now
		t.Fatal(err)
	}
	for i := range 2 {
		if err := d.Put(h1); err != nil {
			t.Fatal(err)
		}
		if got := mustFetch(t, d, h1); !slices.Equal(got, tr) {
			t.Fatalf("after %d puts: %v", i+1, got)
		}
	}
	st := d.Stats()
	if st.Refcounted != 1 || st.Free != 0 {
		t.Fatalf("before last put: %+v", st)
	}
	if err := d.Put(h1); err != nil {
		t.Fatal(err)
	}
	st = d.Stats()
	if st.Refcounted != 0 || st.InUse != 0 || st.Free != 1 || st.Evictions != 1 || st.UsedBytes != 0 || st.FreeBytes != 8*(2+DefaultMaxFrames) {
		t.Fatalf("after last put: %+v", st)
	}
	if _, err := d.Fetch(h1, nil); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("Fetch of evicted handle: %v", err)
	}

	// The freed slot is reused by the next refcounted record, whatever its
	// length, with the next generation.
	h3, err := d.SaveFlags(other, FlagGet)
	if err != nil {
		t.Fatal(err)
	}
	p1, u1, g1 := parts(d, h1)
	if p3, u3, g3 := parts(d, h3); p3 != p1 || u3 != u1 || g3 != g1+1 {
		t.Fatalf("reuse: old %v new %v", h1, h3)
	}
	if _, err := d.Fetch(h1, nil); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("stale handle after reuse: %v", err)
	}
	if got := mustFetch(t, d, h3); !slices.Equal(got, other) {
		t.Fatalf("reused record holds %v", got)
	}
	st = d.Stats()
	if st.Free != 0 || st.Refcounted != 1 || st.Pools != 1 {
		t.Fatalf("after reuse: %+v", st)
	}

	// Saving the old trace again gives a new record, not the stale handle.
	h4, _ := d.SaveFlags(tr, FlagGet)
	if h4 == h1 || h4 == h3 {
		t.Fatalf("resaved trace got %v (old %v, other %v)", h4, h1, h3)
	}
}

// TestGenerationWraps reuses one slot until the handle's generation comes
// round, at the default configuration and at MaxPoolsLimit: the first
// handle is rejected for 2^G - 1 reuses (2,047 and 31), as documented, and
// only the 2^G-th reuse gives its bits back.
func TestGenerationWraps(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		bound int
	}{{Config{}, 2047}, {Config{MaxPools: MaxPoolsLimit}, 31}} {
		d := mustNew(t, tc.cfg)
		first, _ := d.SaveFlags([]uint64{1, 2}, FlagGet)
		h := first
		for i := 1; i <= tc.bound+1; i++ {
			if err := d.Put(h); err != nil {
				t.Fatal(err)
			}
			h, _ = d.SaveFlags([]uint64{1, 2, uint64(i)}, FlagGet)
			_, _, g := parts(d, h)
			if want := uint32(i % (tc.bound + 1)); g != want {
				t.Fatalf("MaxPools %d, reuse %d: generation %d, want %d", tc.cfg.MaxPools, i, g, want)
			}
			if _, err := d.Fetch(first, nil); i <= tc.bound && !errors.Is(err, ErrBadHandle) {
				t.Fatalf("MaxPools %d, reuse %d: first handle not stale", tc.cfg.MaxPools, i)
			}
		}
		if h != first {
			t.Fatalf("MaxPools %d: after %d reuses the generation should come round to the first handle", tc.cfg.MaxPools, tc.bound+1)
		}
	}
}

func TestPersistentAndPromotion(t *testing.T) {
	d := mustNew(t, Config{})
	hp, _ := d.Save([]uint64{1})
	if err := d.Put(hp); err != nil { // no-op on persistent
		t.Fatal(err)
	}
	if err := d.Get(hp); err != nil {
		t.Fatal(err)
	}
	if h, _ := d.SaveFlags([]uint64{1}, FlagGet); h != hp {
		t.Fatal("FlagGet save of a persistent trace changed handle")
	}
	for range 3 {
		_ = d.Put(hp)
	}
	mustFetch(t, d, hp)

	hr, _ := d.SaveFlags([]uint64{2}, FlagGet)
	if h, _ := d.Save([]uint64{2}); h != hr {
		t.Fatal("plain Save of a refcounted trace changed handle")
	}
	st := d.Stats()
	if st.Persistent != 2 || st.Refcounted != 0 {
		t.Fatalf("promotion: %+v", st)
	}
	_ = d.Put(hr)
	mustFetch(t, d, hr) // promoted: never evicted
}

func TestLimits(t *testing.T) {
	perPool := (poolWords - firstWord) / recordWords(32)
	traces := genTraces(3*perPool, 32, 7)
	d := mustNew(t, Config{MaxPools: 2})
	var hs []Handle
	var err error
	for _, tr := range traces {
		var h Handle
		h, err = d.Save(tr)
		if err != nil {
			break
		}
		hs = append(hs, h)
	}
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("filling 2 pools: err %v after %d traces", err, len(hs))
	}
	if len(hs) != 2*perPool {
		t.Fatalf("stored %d traces in 2 pools, want %d", len(hs), 2*perPool)
	}
	st := d.Stats()
	if st.Pools != 2 || st.NoSpace != 1 || st.InUse != len(hs) || st.Misses != uint64(len(hs)) {
		t.Fatalf("stats at limit: %+v", st)
	}
	// Consistent after the failure: everything fetches, hits still hit.
	for i, h := range hs {
		if got := mustFetch(t, d, h); !slices.Equal(got, traces[i]) {
			t.Fatalf("trace %d corrupted after limit", i)
		}
		if h2, err := d.Save(traces[i]); h2 != h || err != nil {
			t.Fatalf("hit after limit: %v %v", h2, err)
		}
	}

	// FlagNoAlloc: uses the rest of the current pool, never a new one.
	d = mustNew(t, Config{})
	if _, err := d.SaveFlags([]uint64{1}, FlagNoAlloc); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("FlagNoAlloc on an empty depot: %v", err)
	}
	if _, err := d.Save([]uint64{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SaveFlags([]uint64{2}, FlagNoAlloc); err != nil {
		t.Fatalf("FlagNoAlloc with room in the pool: %v", err)
	}
	// A freed record can be reused under FlagNoAlloc once pools are full.
	d = mustNew(t, Config{MaxPools: 1})
	hr, _ := d.SaveFlags([]uint64{9, 9, 9}, FlagGet)
	for i := uint64(0); ; i++ {
		if _, err := d.Save([]uint64{i + 100, i, i}); err != nil {
			break
		}
	}
	if _, err := d.SaveFlags([]uint64{8, 8, 8}, FlagNoAlloc); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("full depot accepted a trace: %v", err)
	}
	_ = d.Put(hr)
	if _, err := d.SaveFlags([]uint64{8, 8, 8}, FlagNoAlloc); err != nil {
		t.Fatalf("freed record not reused: %v", err)
	}
}

func TestBytesPerTrace(t *testing.T) {
	traces := genTraces(4096, 32, 1)
	d := mustNew(t, Config{MaxPools: 32})
	for _, tr := range traces {
		if _, err := d.Save(tr); err != nil {
			t.Fatal(err)
		}
	}
	st := d.Stats()
	per := float64(st.UsedBytes+st.TableBytes) / float64(st.InUse)
	if limit := 8.0*32 + 32; per > limit {
		t.Fatalf("%.1f bytes per 32-frame trace (used %d, table %d), limit %.0f", per, st.UsedBytes, st.TableBytes, limit)
	}
}

func TestFetchNoAlloc(t *testing.T) {
	d := mustNew(t, Config{})
	h, _ := d.Save(genTraces(1, 32, 3)[0])
	buf := make([]uint64, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = d.Fetch(h, buf[:0]); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Fetch allocates %.1f times per call", allocs)
	}
	tr := genTraces(1, 32, 3)[0]
	allocs = testing.AllocsPerRun(100, func() {
		if _, err := d.Save(tr); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Save hit allocates %.1f times per call", allocs)
	}
}

// TestHashCollisions forces every trace into one bucket and checks that
// full comparison still keeps them apart.
func TestHashCollisions(t *testing.T) {
	d := mustNew(t, Config{Buckets: 1})
	traces := genTraces(300, 5, 9)
	hs := map[Handle]int{}
	for i, tr := range traces {
		h, err := d.SaveFlags(tr, FlagGet)
		if err != nil {
			t.Fatal(err)
		}
		if j, dup := hs[h]; dup {
			t.Fatalf("traces %d and %d share handle %v", j, i, h)
		}
		hs[h] = i
	}
	// Evict every other one: unlinking from the middle of the chain.
	for h, i := range hs {
		if i%2 == 0 {
			if err := d.Put(h); err != nil {
				t.Fatal(err)
			}
		}
	}
	for h, i := range hs {
		got, err := d.Fetch(h, nil)
		if i%2 == 0 {
			if err == nil {
				t.Fatalf("evicted trace %d still fetches", i)
			}
			continue
		}
		if err != nil || !slices.Equal(got, traces[i]) {
			t.Fatalf("trace %d: %v %v", i, got, err)
		}
		if h2, _ := d.SaveFlags(traces[i], FlagGet); h2 != h {
			t.Fatalf("trace %d: resave gave %v, want %v", i, h2, h)
		}
	}
}

// TestConcurrent runs savers, fetchers and putters over overlapping sets of
// traces. Run it with -race.
func TestConcurrent(t *testing.T) {
	traces := genTraces(256, 16, 11)
	d := mustNew(t, Config{Buckets: 64})
	persistent := traces[:64] // saved plainly by everyone
	shared := traces[64:]     // saved with FlagGet and Put back
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	fail := func(format string, args ...any) {
		select {
		case errc <- fmt.Errorf(format, args...):
		default:
		}
	}
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			var buf []uint64
			held := map[Handle][]uint64{}
			for range 3000 {
				switch r.IntN(4) {
				case 0:
					tr := persistent[r.IntN(len(persistent))]
					h, err := d.Save(tr)
					if err != nil {
						fail("Save: %v", err)
						return
					}
					if buf, err = d.Fetch(h, buf[:0]); err != nil || !slices.Equal(buf, tr) {
						fail("persistent %v fetched %v, %v", h, buf, err)
						return
					}
				case 1, 2:
					tr := shared[r.IntN(len(shared))]
					h, err := d.SaveFlags(tr, FlagGet)
					if err != nil {
						fail("SaveFlags: %v", err)
						return
					}
					if prev, ok := held[h]; ok && !slices.Equal(prev, tr) {
						fail("handle %v names two traces", h)
						return
					}
					if _, ok := held[h]; ok {
						_ = d.Put(h) // keep one reference per handle
					}
					held[h] = tr
				case 3:
					for h, tr := range held {
						var err error
						if buf, err = d.Fetch(h, buf[:0]); err != nil || !slices.Equal(buf, tr) {
							fail("held %v fetched %v, %v; want %v", h, buf, err, tr)
							return
						}
						if err := d.Put(h); err != nil {
							fail("Put: %v", err)
							return
						}
						delete(held, h)
						break
					}
				}
			}
			for h := range held {
				if err := d.Put(h); err != nil {
					fail("final Put: %v", err)
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	st := d.Stats()
	if st.Refcounted != 0 || st.Persistent != len(persistent) {
		t.Fatalf("after all puts: %+v", st)
	}
	for _, tr := range persistent {
		h, _ := d.Save(tr)
		if got := mustFetch(t, d, h); !slices.Equal(got, tr) {
			t.Fatal("persistent trace lost")
		}
	}
}

// TestConcurrentEvictFetch has writers evict and reuse records of one size
// class as fast as they can while readers fetch and save-hit the same
// handles: a reader must get either an error or exactly one whole trace of
// the set, never a mix of two. Run it with -race.
func TestConcurrentEvictFetch(t *testing.T) {
	// 64 frames each, all different: one size class, and any mix of two
	// traces is not a trace of the set.
	r0 := rand.New(rand.NewPCG(13, 13))
	traces := make([][]uint64, 16)
	for i := range traces {
		traces[i] = make([]uint64, 64)
		for j := range traces[i] {
			traces[i][j] = r0.Uint64()
		}
	}
	known := map[string]bool{}
	for _, tr := range traces {
		known[string(u64bytes(tr))] = true
	}
	d := mustNew(t, Config{Buckets: 4})
	var handles [16]atomic.Uint32
	var wg, readers sync.WaitGroup
	var bad atomic.Value
	stop := make(chan struct{})
	for w := range 2 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for range 20000 {
				i := r.IntN(len(traces))
				h, err := d.SaveFlags(traces[i], FlagGet)
				if err != nil {
					bad.Store(err.Error())
					return
				}
				handles[i].Store(uint32(h))
				_ = d.Put(h)
			}
		})
	}
	for g := range 3 {
		readers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 3))
			buf := make([]uint64, 0, 64)
			for {
				select {
				case <-stop:
					return
				default:
				}
				h := Handle(handles[r.IntN(len(handles))].Load())
				got, err := d.Fetch(h, buf[:0])
				if err == nil && !known[string(u64bytes(got))] {
					bad.Store(fmt.Sprintf("Fetch(%v) returned a mixed trace %#x", h, got))
					return
				}
				// A lock-free hit must name the trace it was given.
				tr := traces[r.IntN(len(traces))]
				if h, err := d.SaveFlags(tr, FlagGet); err == nil {
					if got, err := d.Fetch(h, buf[:0]); err != nil || !slices.Equal(got, tr) {
						bad.Store(fmt.Sprintf("held %v fetched %#x, %v; want %#x", h, got, err, tr))
						return
					}
					_ = d.Put(h)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	if msg := bad.Load(); msg != nil {
		t.Fatal(msg)
	}
	st := d.Stats()
	if st.Refcounted != 0 || st.InUse != 0 || st.Evictions < 1000 {
		t.Fatalf("after all puts: %+v", st)
	}
}

// TestSequenceCheck evicts and reuses a record inside a reader's window
// (between reading the frames and re-checking the state): Fetch must report
// the handle stale and a Save must not return the reused slot for the old
// trace.
func TestSequenceCheck(t *testing.T) {
	oldTr := []uint64{1, 2, 3, 4}
	newTr := []uint64{5, 6, 7, 8}
	d := mustNew(t, Config{})
	h, _ := d.SaveFlags(oldTr, FlagGet)
	var reused Handle
	testHookAfterRead = func() {
		testHookAfterRead = nil // the hook's own Save must not recurse
		if err := d.Put(h); err != nil {
			t.Error(err)
		}
		reused, _ = d.SaveFlags(newTr, FlagGet)
	}
	got, err := d.Fetch(h, nil)
	if !errors.Is(err, ErrBadHandle) || len(got) != 0 {
		t.Fatalf("Fetch across eviction = %v, %v; want stale", got, err)
	}
	if mask := uint32(1)<<d.locBits - 1; uint32(reused)&mask != uint32(h)&mask {
		t.Fatalf("slot not reused: %v then %v", h, reused)
	}

	// The same inside a lock-free Save hit of oldTr: the hit must be
	// refused, and the slow path stores oldTr afresh.
	d = mustNew(t, Config{})
	h, _ = d.SaveFlags(oldTr, FlagGet)
	testHookAfterRead = func() {
		testHookAfterRead = nil
		_ = d.Put(h)
		reused, _ = d.SaveFlags(newTr, FlagGet)
	}
	h2, err := d.SaveFlags(oldTr, FlagGet)
	testHookAfterRead = nil
	if err != nil || h2 == h || h2 == reused {
		t.Fatalf("Save across eviction = %v, %v (old %v, reused %v)", h2, err, h, reused)
	}
	if got := mustFetch(t, d, h2); !slices.Equal(got, oldTr) {
		t.Fatalf("Save across eviction stored %v", got)
	}
	if got := mustFetch(t, d, reused); !slices.Equal(got, newTr) {
		t.Fatalf("reused slot holds %v", got)
	}
}

func TestHitCount(t *testing.T) {
	for _, tc := range []struct {
		cfg      Config
		wantHits uint64
	}{
		{Config{CountHits: true}, 3},
		{Config{}, 0},
	} {
		d := mustNew(t, tc.cfg)
		for range 4 {
			if _, err := d.Save([]uint64{1, 2}); err != nil {
				t.Fatal(err)
			}
		}
		if st := d.Stats(); st.Hits != tc.wantHits || st.Misses != 1 {
			t.Errorf("%+v: hits %d misses %d, want %d and 1", tc.cfg, st.Hits, st.Misses, tc.wantHits)
		}
	}
}

// TestTableChurn evicts and stores refcounted traces for many rounds: the
// tombstones that evictions leave are dropped by rebuilds, so the table
// stays the size its live records need, and every live trace is still
// found (a hit returns its own handle) while the evicted ones are gone.
func TestTableChurn(t *testing.T) {
	d := mustNew(t, Config{MaxFrames: 8})
	const live, rounds = 500, 60
	all := genTraces(live*rounds, 8, 5)
	var maxTable int64
	for r := range rounds {
		batch := all[r*live : (r+1)*live]
		hs := make([]Handle, live)
		for i, tr := range batch {
			h, err := d.SaveFlags(tr, FlagGet)
			if err != nil {
				t.Fatal(err)
			}
			hs[i] = h
		}
		for i, tr := range batch {
			h, err := d.SaveFlags(tr, FlagGet) // a hit: a second reference
			if err != nil || h != hs[i] {
				t.Fatalf("round %d trace %d: hit gave %v, %v; want %v", r, i, h, err, hs[i])
			}
		}
		for _, h := range hs {
			for range 2 {
				if err := d.Put(h); err != nil {
					t.Fatal(err)
				}
			}
		}
		st := d.Stats()
		if st.InUse != 0 || st.Free == 0 {
			t.Fatalf("round %d: %+v after putting every record", r, st)
		}
		maxTable = max(maxTable, st.TableBytes)
	}
	// 500 live entries need 1,024 slots at most 13/16 full; tombstones
	// may double that once, never more.
	if maxTable > 2048*4 {
		t.Errorf("table grew to %d bytes for %d live records at a time", maxTable, live)
	}
	if h, err := d.SaveFlags(all[0], FlagGet); err != nil || h == 0 {
		t.Fatalf("re-save after churn: %v, %v", h, err)
	}
	if n, err := d.Len(d.mustSave(t, all[0])); err != nil || n != 8 {
		t.Fatalf("Len after churn: %d, %v", n, err)
	}
}

func (d *Depot) mustSave(t *testing.T, tr []uint64) Handle {
	t.Helper()
	h, err := d.Save(tr)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestConcurrentHitCount counts hits on more goroutines than there are
// hit-counter shards, so that some goroutines share a shard: no hit is
// lost or counted twice.
func TestConcurrentHitCount(t *testing.T) {
	d := mustNew(t, Config{CountHits: true})
	traces := genTraces(16, 8, 9)
	for _, tr := range traces {
		d.mustSave(t, tr)
	}
	const workers, per = 3 * hitShards / 2, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				tr := traces[(w+i)%len(traces)]
				if _, err := d.Save(tr); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if st := d.Stats(); st.Hits != workers*per || st.Misses != uint64(len(traces)) {
		t.Fatalf("hits %d misses %d, want %d and %d", st.Hits, st.Misses, workers*per, len(traces))
	}
}

// TestHitShardStaysWithGoroutine checks where one goroutine's hits are
// counted: in its own shard (two at most, if its stack moved once between
// them), not spread over the shards by trace, where every goroutine would
// write every shard's cache line in turn.
func TestHitShardStaysWithGoroutine(t *testing.T) {
	d := mustNew(t, Config{CountHits: true})
	traces := genTraces(4*hitShards, 8, 21)
	for _, tr := range traces {
		d.mustSave(t, tr)
	}
	done := make(chan [hitShards]uint64)
	go func() { // a goroutine of its own: nothing else counts in its shard
		var before, after [hitShards]uint64
		for i := range d.hits {
			before[i] = d.hits[i].n.Load()
		}
		for _, tr := range traces {
			if _, err := d.Save(tr); err != nil {
				t.Error(err)
			}
		}
		for i := range d.hits {
			after[i] = d.hits[i].n.Load() - before[i]
		}
		done <- after
	}()
	delta := <-done
	used, total := 0, uint64(0)
	for _, n := range delta {
		if n != 0 {
			used++
		}
		total += n
	}
	if total != uint64(len(traces)) || used > 2 {
		t.Fatalf("%d hits counted in %d shards, want %d in one or two", total, used, len(traces))
	}
}

// TestEntryTextMatchesRanges checks EntryText's filter against the
// definition (pc in some [start[i], end[i])) on random range sets, empty
// and inverted ranges among them, at every range edge and at random pcs:
// the filter's hull precheck must never turn a pc away that is in a range.
func TestEntryTextMatchesRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 1))
	for iter := range 2000 {
		n := rng.IntN(5)
		start, end := make([]uint64, n), make([]uint64, n)
		for i := range n {
			start[i] = rng.Uint64N(1 << 12)
			end[i] = start[i] + rng.Uint64N(64) - 8 // some empty or inverted
			if iter%7 == 0 {
				start[i], end[i] = ^uint64(0)-rng.Uint64N(16), ^uint64(0)-rng.Uint64N(16)
			}
		}
		f := EntryText(start, end)
		pcs := []uint64{0, 1, ^uint64(0), ^uint64(0) - 1}
		for i := range n {
			pcs = append(pcs, start[i]-1, start[i], start[i]+1, end[i]-1, end[i], end[i]+1)
		}
		for range 32 {
			pcs = append(pcs, rng.Uint64N(1<<12+128))
		}
		for _, pc := range pcs {
			want := false
			for i := range n {
				want = want || pc >= start[i] && pc < end[i]
			}
			if got := f(pc); got != want {
				t.Fatalf("ranges %v..%v: filter(%#x) = %v, want %v", start, end, pc, got, want)
			}
		}
	}
}
