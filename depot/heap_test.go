package depot

import (
	"cmp"
	"errors"
	"runtime"
	"testing"
)

// heapPerTrace saves n distinct traces of depth frames into a depot made by
// cfg and returns the growth of the live heap (runtime.MemStats.HeapAlloc
// after a full GC, the traces themselves excluded) per stored trace. It
// reports how many traces fit before ErrNoSpace.
func heapPerTrace(t testing.TB, cfg Config, n, depth int, flags Flags) (perTrace float64, stored int) {
	t.Helper()
	traces := genTraces(n, depth, 77)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	d := mustNew(t, cfg)
	for _, tr := range traces {
		if _, err := d.SaveFlags(tr, flags); err != nil {
			if errors.Is(err, ErrNoSpace) {
				break
			}
			t.Fatal(err)
		}
		stored++
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(d)
	runtime.KeepAlive(traces)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(stored), stored
}

// TestHeapPerTrace measures what 100,000 distinct persistent 32-frame
// traces cost on the real heap, at the default configuration and at
// MaxPoolsLimit: at most 8 bytes per frame plus 32 per trace, and the
// default configuration holds them all.
func TestHeapPerTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 60 MB")
	}
	const n, depth = 100000, 32
	limit := 8.0*depth + 32
	for _, cfg := range []Config{{}, {MaxPools: MaxPoolsLimit}} {
		per, stored := heapPerTrace(t, cfg, n, depth, 0)
		t.Logf("MaxPools %d: %d traces, %.1f heap bytes per trace (limit %.0f)", cfg.MaxPools, stored, per, limit)
		if stored != n {
			t.Errorf("MaxPools %d: only %d of %d traces fit", cfg.MaxPools, stored, n)
		}
		if per > limit {
			t.Errorf("MaxPools %d: %.1f heap bytes per %d-frame trace, limit %.0f", cfg.MaxPools, per, depth, limit)
		}
	}
}

// TestHeapPerRefcountedTrace measures refcounted (evictable) 32-frame
// traces on the real heap. Every refcounted record takes the space of
// MaxFrames frames, so that freed space serves any later trace: 528 bytes
// at the default MaxFrames of 64, 272 with MaxFrames 32 (the same as a
// persistent trace); the overheads on top are those of persistent traces
// (bucket table, pool tails and bitmaps, at most 32 bytes).
func TestHeapPerRefcountedTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 60 MB")
	}
	const n, depth = 50000, 32
	for _, cfg := range []Config{{}, {MaxFrames: 32}, {MaxPools: MaxPoolsLimit}} {
		per, stored := heapPerTrace(t, cfg, n, depth, FlagGet)
		maxFrames := cmp.Or(cfg.MaxFrames, DefaultMaxFrames)
		record := float64(8 * recordWords(maxFrames))
		t.Logf("MaxFrames %d MaxPools %d: %d refcounted traces, %.1f heap bytes per trace (record %.0f)", cfg.MaxFrames, cfg.MaxPools, stored, per, record)
		if stored != n {
			t.Errorf("%+v: only %d of %d traces fit", cfg, stored, n)
		}
		if per < record || per > record+32 {
			t.Errorf("%+v: %.1f heap bytes per refcounted trace, want %.0f to %.0f", cfg, per, record, record+32)
		}
	}
}

// TestRefcountedCapacity checks how many refcounted traces a depot holds
// before ErrNoSpace: every refcounted record takes the space of MaxFrames
// frames, so the default configuration holds 62,976 of them, short or
// long (123 records of 528 bytes in each of 512 pools), fewer than the
// 100,000 that 32-frame traces would fill at their own size; with
// MaxFrames 32 it holds 122,368, the same as persistent ones.
func TestRefcountedCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 32 MiB of pools twice")
	}
	for _, c := range []struct {
		cfg   Config
		depth int
		want  int
	}{
		{Config{}, 32, 512 * 123},
		{Config{}, 1, 512 * 123},
		{Config{MaxFrames: 32}, 32, 512 * 239},
	} {
		d := mustNew(t, c.cfg)
		tr := make([]uint64, c.depth)
		stored := 0
		for i := 1; ; i++ {
			for j := range tr {
				tr[j] = uint64(i)<<8 | uint64(j)
			}
			if _, err := d.SaveFlags(tr, FlagGet); err != nil {
				if !errors.Is(err, ErrNoSpace) {
					t.Fatal(err)
				}
				break
			}
			stored++
		}
		if stored != c.want || stored != d.Stats().Refcounted {
			t.Errorf("%+v, %d frames: %d refcounted traces stored (Stats %d), want %d", c.cfg, c.depth, stored, d.Stats().Refcounted, c.want)
		}
		if c.cfg.MaxFrames == 32 && stored < 100000 {
			t.Errorf("MaxFrames 32 holds only %d refcounted 32-frame traces", stored)
		}
	}
}
