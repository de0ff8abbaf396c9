package kernel_test

import (
	"fmt"
	"github.com/unwindkit/unwindkit/fp"

	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// Example unwinds the CPU that Debian's 6.12 kernel interrupted with the
// sysrq-l IPI, from its dumped registers, and checks the walk against the
// trace the kernel printed.
func Example() {
	cp, err := kernel.OpenCapture("../../testdata/kernel/deb-6.12")
	if err != nil {
		fmt.Println(err)
		return
	}
	s := &cp.Expected.Stops[1] // l-ipi
	k, err := cp.Kernel(s)
	if err != nil {
		fmt.Println(err)
		return
	}
	w, err := k.CPUWalk(s.StoppedCPU)
	if err != nil {
		fmt.Println(err)
		return
	}
	fs, end, err := w.Run()
	ws := k.Strings(fs)
	fmt.Println(k.ABI, "|", len(fs), "frames, final:", end == fp.EndFinal, err)
	at, err := kernel.MatchPrinted(ws, cp.Expected.Traces[s.Trace].Frames)
	fmt.Println("printed trace from frame", at, fs[at].Origin, ws[at], "matches:", err == nil)
	fmt.Println("last:", ws[len(ws)-1])
	// Output:
	// final-record | 19 frames, final: true <nil>
	// printed trace from frame 11 regs-pc finish_task_switch.isra.0+0x7c/0x2a8 matches: true
	// last: ret_from_fork+0x10/0x20
}
