package depot

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// model is the reference: a map from trace to record, with no pools, no
// hashing and no concurrency.
type model struct {
	byKey    map[string]*modelRec
	byHandle map[Handle]*modelRec
}

type modelRec struct {
	trace      []uint64
	h          Handle
	persistent bool
	refs       int
}

func (m *model) lookup(h Handle) *modelRec { return m.byHandle[h] }

// TestModel runs random operation sequences against the depot and the
// reference model and compares every result.
func TestModel(t *testing.T) {
	for seed := range uint64(40) {
		runModel(t, seed, 2000)
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, 99))
	// Few distinct traces and few sizes, so records are reused often.
	var pool [][]uint64
	for i := range 24 {
		n := 1 + r.IntN(4)
		tr := make([]uint64, n)
		for j := range tr {
			tr[j] = uint64(r.IntN(3)) + uint64(i%6)<<8
		}
		pool = append(pool, tr)
	}
	d := mustNew(t, Config{Buckets: 1 << r.IntN(4)})
	m := &model{byKey: map[string]*modelRec{}, byHandle: map[Handle]*modelRec{}}
	var seen []Handle // every handle ever returned
	for step := range steps {
		tr := pool[r.IntN(len(pool))]
		key := string(u64bytes(tr))
		op := r.IntN(6)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d step %d op %d: "+format, append([]any{seed, step, op}, args...)...)
		}
		switch op {
		case 0, 1: // Save / SaveFlags(FlagGet)
			get := op == 1
			var h Handle
			var err error
			if get {
				h, err = d.SaveFlags(tr, FlagGet)
			} else {
				h, err = d.Save(tr)
			}
			if err != nil {
				fail("save: %v", err)
			}
			if rec := m.byKey[key]; rec != nil {
				if h != rec.h {
					fail("save of stored trace gave %v, model %v", h, rec.h)
				}
				if get && !rec.persistent {
					rec.refs++
				}
				if !get {
					rec.persistent = true
				}
			} else {
				if m.byHandle[h] != nil {
					fail("new trace got live handle %v", h)
				}
				rec := &modelRec{trace: tr, h: h, persistent: !get, refs: 1}
				m.byKey[key], m.byHandle[h] = rec, rec
			}
			seen = append(seen, h)
		case 2, 3: // Put or Get of a known (maybe stale) handle
			if len(seen) == 0 {
				continue
			}
			h := seen[r.IntN(len(seen))]
			rec := m.lookup(h)
			var err error
			if op == 2 {
				err = d.Put(h)
			} else {
				err = d.Get(h)
			}
			if rec == nil {
				if !errors.Is(err, ErrBadHandle) {
					fail("Put/Get of stale %v: %v", h, err)
				}
				continue
			}
			if err != nil {
				fail("Put/Get of live %v: %v", h, err)
			}
			if rec.persistent {
				continue
			}
			if op == 3 {
				rec.refs++
			} else if rec.refs--; rec.refs == 0 {
				delete(m.byKey, string(u64bytes(rec.trace)))
				delete(m.byHandle, h)
			}
		case 4: // Fetch of a known (maybe stale) handle
			if len(seen) == 0 {
				continue
			}
			h := seen[r.IntN(len(seen))]
			got, err := d.Fetch(h, nil)
			if rec := m.lookup(h); rec != nil {
				if err != nil || !slices.Equal(got, rec.trace) {
					fail("Fetch(%v) = %v, %v; model %v", h, got, err, rec.trace)
				}
			} else if !errors.Is(err, ErrBadHandle) {
				fail("Fetch of stale %v = %v, %v", h, got, err)
			}
		case 5: // Fetch of a random handle
			h := Handle(r.Uint32())
			if r.IntN(2) == 0 {
				h = mkHandle(d, uint32(r.IntN(2)), uint32(32+r.IntN(64)), uint32(r.IntN(2)))
			}
			got, err := d.Fetch(h, nil)
			if rec := m.lookup(h); rec != nil {
				if err != nil || !slices.Equal(got, rec.trace) {
					fail("Fetch(%v) = %v, %v; model %v", h, got, err, rec.trace)
				}
			} else if err == nil {
				fail("Fetch of unknown %v gave %v", h, got)
			}
		}
		// Invariants after every step.
		st := d.Stats()
		np, nr := 0, 0
		for _, rec := range m.byHandle {
			if rec.persistent {
				np++
			} else {
				nr++
			}
		}
		if st.Persistent != np || st.Refcounted != nr || st.InUse != len(m.byHandle) {
			fail("stats %+v, model persistent %d refcounted %d", st, np, nr)
		}
	}
}

// FuzzModel runs the model comparison from fuzzed seeds: random operation
// sequences (saves with and without references, Get, Put, Fetch of live,
// stale and random handles) against the reference model.
func FuzzModel(f *testing.F) {
	f.Add(uint64(0), uint16(500))
	f.Add(uint64(41), uint16(2000))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		runModel(t, seed, int(steps%3000))
	})
}
