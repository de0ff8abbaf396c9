package prologue_test

import (
	"fmt"

	"github.com/unwindkit/unwindkit/unwind/prologue"
)

// Scan a binary built with clang -fsanitize=shadow-call-stack
// -mbranch-protection=pac-ret and check that a function's shape is what
// the flags promise.
func Example() {
	b, err := prologue.OpenBinary("../../testdata/arm64/bin/clang-pacret.elf")
	if err != nil {
		fmt.Println(err)
		return
	}
	f, _ := b.Func("shape_args")
	fmt.Printf("%s: scs push %v pop %v, signs with key %v before the push %v, frame record %v, leaf %v\n",
		f.Name, f.SCSPush, f.SCSPop, f.Sign, f.SignBeforePush, f.FrameRecord, f.Leaf())
	// Output: shape_args: scs push true pop true, signs with key A before the push true, frame record true, leaf false
}
