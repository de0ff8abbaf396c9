//go:build amd64 || arm64

package live

import (
	"slices"
	"testing"
)

// expandFirst answers from the first frame's cached expansion followed by
// the raw return addresses, shifted up by what the skip leaves of the
// expansion, truncated to len(pc); it declines a frame that records itself
// and a skip beyond the expansion.
func TestExpandFirst(t *testing.T) {
	resetCache()
	defer resetCache()
	const ret = 0x4a0010
	exp := []uintptr{ret, 0x4a0101, 0x4a0202} // the frame and two inlined callers
	insert(ret, exp, false, func(uintptr) bool { return true })
	if w := homeTab[homeHash(ret)].Load(); w&addrMask != ret || wordKind(w) != kindMany {
		t.Fatalf("home slot holds %#x, want ret's kindMany word", w)
	}
	raw := []uintptr{ret, 0x10, 0x20, 0x30}
	tests := []struct {
		skip, size, m int
		want          []uintptr
	}{
		{2, 4, 4, []uintptr{0x4a0202, 0x10, 0x20, 0x30}},                // no shift: the public skip 1 case
		{1, 6, 4, []uintptr{0x4a0101, 0x4a0202, 0x10, 0x20, 0x30}},      // shift 1, room
		{0, 6, 4, []uintptr{ret, 0x4a0101, 0x4a0202, 0x10, 0x20, 0x30}}, // shift 2, room
		{0, 4, 4, []uintptr{ret, 0x4a0101, 0x4a0202, 0x10}},             // shift 2, truncated
		{0, 2, 2, []uintptr{ret, 0x4a0101}},                             // pc shorter than the expansion
		{1, 1, 1, []uintptr{0x4a0101}},
	}
	for _, tc := range tests {
		pc := make([]uintptr, tc.size+1)
		pc[tc.size] = 0xdead
		copy(pc, raw[:tc.m])
		n := expandFirst(pc[:tc.size], tc.m, tc.skip)
		if n < 0 || !slices.Equal(pc[:n], tc.want) || pc[tc.size] != 0xdead {
			t.Errorf("skip %d, len %d, m %d: %d %#x, want %#x", tc.skip, tc.size, tc.m, n, pc[:max(n, 0)], tc.want)
		}
	}
	if n := expandFirst([]uintptr{ret, 0x10}, 2, 3); n != -1 {
		t.Errorf("skip beyond the expansion: %d, want -1", n)
	}
	const self = 0x4b0010
	insert(self, []uintptr{self}, false, func(uintptr) bool { return true })
	if n := expandFirst([]uintptr{self, 0x10}, 2, 1); n != -1 {
		t.Errorf("a frame that records itself: %d, want -1 (fastWalk skips it)", n)
	}
	if n := expandFirst([]uintptr{0x4c0010, 0x10}, 2, 0); n != -1 {
		t.Errorf("a miss: %d, want -1", n)
	}
}

// expandFirst remembers the public Callers(1)'s common case in firstTab
// (the frame's expansion is [ret, the caller's pc], and skip 1 keeps the
// second), only when the difference fits in 16 bits, and resetCache
// forgets it; Callers then answers pc[0] from the slot: ret plus the
// difference.
func TestExpandFirstRemembersPublicSkip(t *testing.T) {
	resetCache()
	defer resetCache()
	pass := func(uintptr) bool { return true }
	const near, far = 0x4a0010, 0x4b0010
	insert(near, []uintptr{near, near - 0x21}, false, pass)
	insert(far, []uintptr{far, far + 0x12345}, false, pass)
	pc := []uintptr{near, 0x10}
	if n := expandFirst(pc, 2, 1); n != 2 || pc[0] != near-0x21 {
		t.Fatalf("expandFirst: %d %#x, want 2, %#x", n, pc[0], near-0x21)
	}
	w := firstTab[firstHash(near)].Load()
	if w&addrMask != near || near+uintptr(int16(w>>addrBits)) != near-0x21 {
		t.Fatalf("firstTab slot %#x, want %#x and a difference of -0x21", w, near)
	}
	pc = []uintptr{far, 0x10}
	if n := expandFirst(pc, 2, 1); n != 2 || pc[0] != far+0x12345 {
		t.Fatalf("expandFirst far: %d %#x", n, pc[0])
	}
	if w := firstTab[firstHash(far)].Load(); w&addrMask == far {
		t.Fatalf("firstTab holds %#x: the difference does not fit in 16 bits", w)
	}
	pc = []uintptr{near, 0x4a0101, 0x10} // skip 0 keeps the whole expansion
	copy(pc, []uintptr{near, 0x10})
	before := firstTab[firstHash(near)].Load()
	if n := expandFirst(pc, 2, 0); n != 3 || firstTab[firstHash(near)].Load() != before {
		t.Fatalf("skip 0: %d, slot %#x (was %#x)", n, firstTab[firstHash(near)].Load(), before)
	}
	resetCache()
	if w := firstTab[firstHash(near)].Load(); w != 0 {
		t.Fatalf("after resetCache the slot holds %#x", w)
	}
}

// The known boundary is never published as a frame that records itself,
// whatever a learning pass saw: walkProbe's loop relies on its home-slot
// compare failing there to compare it with the boundary.
func TestBoundaryNeverSelf(t *testing.T) {
	resetCache()
	defer resetCache()
	old := stopPC.Load()
	defer stopPC.Store(old)
	const ret = 0x4d0010
	stopPC.Store(ret)
	insert(ret, []uintptr{ret}, false, func(uintptr) bool { return true })
	if w, ok := find(ret); !ok || wordKind(w) != kindSlow || homeTab[homeHash(ret)].Load() == ret {
		t.Fatalf("boundary published as %#x (found %v), want kindSlow", w, ok)
	}
}
