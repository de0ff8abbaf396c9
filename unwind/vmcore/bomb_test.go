package vmcore

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// bounded runs f in a goroutine and fails t when it takes more than 2 s
// or allocates more than 400 MB: the bounds every hostile input is held
// to (an input of a few KiB that costs more is a bomb). It returns what f
// returned, with the time and the bytes allocated logged.
func bounded[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	const wall, alloc = 2 * time.Second, 400 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case r := <-done:
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		a := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %v, %d bytes allocated", what, took, a)
		if took > wall || a > alloc {
			t.Errorf("%s: %v and %d bytes allocated, limits %v and %d", what, took, a, wall, alloc)
		}
		return r
	case <-time.After(wall):
		t.Fatalf("%s: still running after %v", what, wall)
	}
	panic("unreachable")
}

// selfBTF is a BTF whose struct task_struct has n anonymous members of
// type task_struct itself (no compiler writes it; a hostile dump can),
// one through a typedef, plus a member named "pid".
func selfBTF(n int) []byte {
	b := &btfBuilder{strs: []byte{0}}
	var ms [][]uint32
	for i := range n {
		typ := uint32(1)
		if i == 0 {
			typ = 2
		}
		ms = append(ms, b.member("", typ, uint32(64*i)))
	}
	ms = append(ms, b.member("pid", 3, 0))
	b.structType("task_struct", 4096, false, ms...) // 1
	b.typ("task_t", btfTypedef, false, 0, 1)        // 2
	b.typ("int", btfInt, false, 0, 4, 32)           // 3
	return b.bytes()
}

// TestBTFTypeLoop: a lookup through anonymous members that are the
// struct itself answers "no such member" at once (before: n^9 descents,
// 5 s for n = 8, hours for n = 16).
func TestBTFTypeLoop(t *testing.T) {
	btf, err := ParseBTF(selfBTF(16))
	if err != nil {
		t.Fatal(err)
	}
	err = bounded(t, "task_struct.thread_info through 16 self-members", func() error {
		_, err := btf.Offset("task_struct.thread_info")
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "no member thread_info") {
		t.Errorf("lookup through a loop: %v, want no member", err)
	}
	// What kernel.New asks: every key, each unknown, none hangs.
	offs := bounded(t, "Offsets over the loop", func() map[string]Offset { return (&Vmcore{}).Offsets(btf) })
	if o := offs["task_struct.stack"]; o.Source != "" {
		t.Errorf("task_struct.stack %+v, want unknown", o)
	}
	// A member beside the loop is still found.
	if o, err := btf.Offset("task_struct.pid"); err != nil || o != 0 {
		t.Errorf("task_struct.pid: %d, %v", o, err)
	}
}
