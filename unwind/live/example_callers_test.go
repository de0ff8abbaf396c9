package live_test

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/unwindkit/unwindkit/unwind/live"
)

func ExampleCallers() {
	pc := make([]uintptr, 16)
	n := live.Callers(1, pc) // skip 1: start at the caller, as with runtime.Callers
	frames := runtime.CallersFrames(pc[:n])
	frame, _ := frames.Next()
	fmt.Println(frame.Function)
	// Output: github.com/unwindkit/unwindkit/unwind/live_test.ExampleCallers
}

func ExampleCallersFP() {
	pc := make([]uintptr, 16)
	n, err := live.CallersFP(1, pc)
	if errors.Is(err, live.ErrNotSupported) {
		n = live.Callers(1, pc) // no frame pointers on this GOARCH
	} else if err != nil {
		fmt.Println(err)
		return
	}
	frame, _ := runtime.CallersFrames(pc[:n]).Next()
	fmt.Println(frame.Function)
	// Output: github.com/unwindkit/unwindkit/unwind/live_test.ExampleCallersFP
}

// A trace for an allocation profile: Callers into a reused buffer, then
// the runtime's own symbolization.
func Example() {
	var pcs [32]uintptr
	n := live.Callers(1, pcs[:])
	fs := runtime.CallersFrames(pcs[:n])
	f, _ := fs.Next()
	fmt.Println(f.Function)
	// Output: github.com/unwindkit/unwindkit/unwind/live_test.Example
}
