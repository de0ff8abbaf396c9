package fp

import (
	"math/rand/v2"
	"testing"
)

// The densest possible chain: every 16 bytes of a stack is a record
// pointing at the next. The walk visits each exactly once and then stops:
// the termination bound (stack bytes / 16 steps) is reached, not passed.
func TestTerminationDensestChain(t *testing.T) {
	m := newMachine(t)
	s := m.stack(Overflow, "ov", 0x100000, OverflowStackSize)
	for a := s.s.Low; a < s.s.High; a += 16 {
		s.store(a, a+16) // the last one points at High: outside
		s.store(a+8, pc(int(a-s.s.Low)/16))
	}
	c := withMem(m.mem, &Config{Stacks: m.stacks, FP: s.s.Low, PC: pc(0)})
	frames, end, err := walkAll(t, c)
	if want := OverflowStackSize/16 + 1; len(frames) != want || end != EndError {
		t.Fatalf("%d frames (%v), want %d", len(frames), end, want)
	}
	wantCorrupt(t, err, "fp outside stacks", s.s.High)
	// Make the last record point back to the first: a cycle over the
	// whole stack is caught on its first repeat.
	s.store(s.s.High-16, s.s.Low)
	frames, _, err = walkAll(t, c)
	if len(frames) != OverflowStackSize/16+1 {
		t.Fatalf("cycle: %d frames", len(frames))
	}
	wantCorrupt(t, err, "fp not increasing", s.s.Low)
}

// Random stacks, full of pointers into each other: every walk ends within
// the bound, with an error that is ErrCorrupt or ErrUnreliable, or
// complete. (FuzzWalk explores the same space with coverage guidance.)
func TestTerminationRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ends := map[End]int{}
	for range 3000 {
		data := make([]byte, 64+rng.IntN(256))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		c, total := fuzzWorld(t, data, rng.Uint64()%0x2100, text+uint64(rng.IntN(8))*0x100, uint16(rng.Uint32()&^1), 0)
		res := runFuzzWalk(t, c, total)
		ends[res.end]++
		if res.err != "" && len(res.frames) > int(total/16)+1 {
			t.Fatalf("%d frames", len(res.frames))
		}
	}
	if ends[EndError] == 0 {
		t.Fatalf("no failing walks: %v", ends)
	}
	t.Logf("ends: %v", ends)
}
