package fp

import "testing"

// TestSaveDoesNotAllocate: a Config built on the caller's stack stays
// there (the Unwinder copies it rather than keeping the pointer).
func TestSaveDoesNotAllocate(t *testing.T) {
	m := newMachine(t)
	s := m.taskStack("task", stackTop, TaskStackSize)
	for i := 1; i <= 8; i++ {
		s.call(pc(i))
	}
	base := *m.config(s, pc(0))
	store := make([]uint64, 16)
	allocs := testing.AllocsPerRun(100, func() {
		c := base // a fresh local Config each time
		if n, err := Save(&c, store, 0); err != nil || n != 9 {
			t.Fatal(n, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Save allocates %.1f times per call", allocs)
	}
}
