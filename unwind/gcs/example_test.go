package gcs_test

import (
	"fmt"

	"github.com/unwindkit/unwindkit/unwind/gcs"
)

// A thread (its GCS: the top marker at 0x7fff00000ff8) calls two functions, takes a signal whose handler calls one
// more, and the copy reads its GCS: the handler's frame, the sigreturn
// trampoline, then the interrupted frames (the signal cap token between
// them is not a frame).
func Example() {
	th, _ := gcs.NewThread(0x7fff00000000, 4096)
	th.Call(0x400100)                   // main calls f: pushes 0x400104
	th.Call(0x400200)                   // f calls g: pushes 0x400204
	ctx, _ := th.Signal(0x7ffff7f754ec) // delivery: signal cap, trampoline
	th.Call(0x400300)                   // the handler calls h: pushes 0x400304
	v := th.View()
	store := make([]uint64, 8)
	n, _ := gcs.Save(&v, store, 0)
	fmt.Printf("%#x\n", store[:n])
	for e := range gcs.Entries(&v) {
		fmt.Println(e)
	}
	th.Return(0x400304)
	th.Return(0x7ffff7f754ec) // the handler returns to the trampoline
	fmt.Println(th.Sigreturn(ctx), th.GCSPR() == 0x7fff00000000+4096-8-16)
	// Output:
	// [0x400304 0x7ffff7f754ec 0x400204 0x400104]
	// 0x400304 (gcs slot 0x7fff00000fd0)
	// 0x7ffff7f754ec (gcs slot 0x7fff00000fd8, sigreturn)
	// 0x400204 (gcs slot 0x7fff00000fe8, signal 1)
	// 0x400104 (gcs slot 0x7fff00000ff0, signal 1)
	// <nil> true
}
