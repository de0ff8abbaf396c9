package live

import (
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"unsafe"
)

var sink atomic.Uintptr

// growCapture empties the cache and calls Callers, whose learning path needs
// stack, on a goroutine whose stack is nearly full; it reports whether the
// stack moved during the call and whether Callers still matched runtime.
//
//go:noinline
func growCapture() (moved bool, err error) {
	var x int
	before := uintptr(unsafe.Pointer(&x))
	resetCache()
	a, b := make([]uintptr, 128), make([]uintptr, 128)
	nb := testCallers(0, b)
	moved = uintptr(unsafe.Pointer(&x)) != before // moved inside Callers
	na := runtime.Callers(1, a)
	if nb != na || !slices.Equal(a[1:na], b[1:nb]) {
		return moved, fmt.Errorf("after growth:\nruntime: %v\nlive:    %v", framesOf(a[:na]), framesOf(b[:nb]))
	}
	// The stack ID of a new stack learns too (resolve asks Callers).
	resetCache()
	before = uintptr(unsafe.Pointer(&x))
	id := testSaveID(1)
	moved = moved || uintptr(unsafe.Pointer(&x)) != before
	if got := id.fetch(128); !slices.Equal(a[1:na], got[1:]) {
		return moved, fmt.Errorf("stack ID after growth:\nruntime: %v\nfetched: %v", framesOf(a[:na]), framesOf(got))
	}
	return moved, nil
}

//go:noinline
func growRec(d int, out chan<- [2]any) {
	var pad [24]uintptr
	pad[d%len(pad)] = uintptr(d)
	if d == 0 {
		moved, err := growCapture()
		out <- [2]any{moved, err}
		return
	}
	growRec(d-1, out)
	sink.Add(pad[(d+1)%len(pad)])
}

// A stack growth while Callers walks and learns must not leave its frame
// pointer pointing into the old stack.
func TestCallersStackGrowth(t *testing.T) {
	// Each depth runs on a fresh goroutine, so that some depth leaves its
	// stack nearly full when Callers learns. The runtime starts goroutine
	// stacks at the average size it has seen (adaptive stack start), which
	// earlier tests can raise well past 60 frames of growRec (a CI run on
	// arm64 saw no move in 60): past 60, go deeper until one has moved.
	moves, d := 0, 0
	for ; d < 60 || moves == 0 && d < 4096; d++ {
		out := make(chan [2]any)
		go growRec(d, out)
		r := <-out
		if r[1] != nil {
			t.Fatalf("depth %d: %v", d, r[1])
		}
		if r[0].(bool) {
			moves++
		}
	}
	if moves == 0 {
		t.Fatal("no stack growth happened during Callers; the test proves nothing")
	}
	t.Logf("%d of %d calls ran across a stack move", moves, d)
}
