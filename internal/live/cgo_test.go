package live

import (
	"runtime"
	"testing"

	"github.com/unwindkit/unwindkit/internal/live/cgotest"
)

// A Go -> C -> Go callback: CallersFP gives the Go frames down to the
// runtime's cgo boundary, without an error.
func TestCallersFPCgoCallback(t *testing.T) {
	if !cgotest.Enabled || !Supported {
		t.Skip("needs cgo and frame pointers")
	}
	var n int
	var err error
	var rt []uintptr
	pc := make([]uintptr, 128)
	cgotest.Call(func() {
		n, err = CallersFP(0, pc)
		rt = make([]uintptr, 128)
		rt = rt[:runtime.Callers(1, rt)]
	})
	t.Logf("CallersFP: %v %v", framesOf(pc[:n]), err)
	t.Logf("runtime: %v", framesOf(rt))
	if err != nil {
		t.Fatalf("CallersFP on a cgo callback stack: %d frames, %v", n, err)
	}
}
