package snapshot_test

import (
	"fmt"
	"os"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/snapshot"
)

// Unwinding a capture of a real arm64 program built with clang's
// -fsanitize=shadow-call-stack and -mbranch-protection=pac-ret.
func ExampleLoad() {
	f, err := os.Open("../../testdata/arm64/snapshots/clang-pacret-pauth-chain.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	s, err := snapshot.Load(f)
	if err != nil {
		fmt.Println(err)
		return
	}
	src, _ := s.Source(unwind.MethodSCS)
	for fr, err := range src.Frames() {
		if err != nil {
			fmt.Println(err)
			break
		}
		fmt.Printf("%s raw %#x\n", src.Name(fr.PC), fr.Raw)
	}
	// Output:
	// shape_args+0x50 raw 0x25000000201f4c
	// shape_vla+0x78 raw 0x45000000202020
	// shape_callee+0x34 raw 0x39000000202088
	// shape_big+0x34 raw 0x7a0000002020fc
	// chain_root+0x14 raw 0x12000000202140
	// main+0x110 raw 0x66000000201444
}

// Unwind a real capture with both techniques and let the front door say
// what each one misses.
func Example() {
	s, err := snapshot.Open("../../testdata/arm64/snapshots/clang-pacret-pauth-leaf.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	var traces [2][]unwind.Frame
	for i, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		src, err := s.Source(method)
		if err != nil {
			fmt.Println(err)
			return
		}
		for f, err := range src.Frames() {
			if err != nil {
				fmt.Println(err)
				break
			}
			traces[i] = append(traces[i], f)
		}
	}
	cmp := unwind.CompareTraces(s.Symbolizer(), traces[0], traces[1])
	for _, r := range cmp.Rows {
		if r.InSCS != r.InFP {
			fmt.Printf("%s: %s\n", s.Symbolizer().Func(max(r.SCS.PC, r.FP.PC)), r.Note)
		}
	}
	// Output:
	// capture_leaf: only FP: the walk's start pc, the running function's own pc, which no prologue pushed
	// _start: only FP: the function that saved it did not push on the SCS (not instrumented, asm, or a signal/exception frame)
}
