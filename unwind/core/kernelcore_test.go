package core_test

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
)

// kernelCore is the core file the Linux kernel itself wrote (Debian's
// 6.1 arm64 kernel under qemu-system-aarch64, testdata/kernel/capture.sh):
// a static program that crashes in a leaf, with gdb-multiarch's backtrace
// of the same file beside it.
const kernelCore = "../../testdata/kernel/usercore"

// TestKernelWrittenCore unwinds the kernel-written core and holds the FP
// walk to gdb's backtrace of the same file: gdb's frame 0 is the crashing
// pc, frame 1 the caller only x30 holds (leaf() saves nothing), and every
// later frame's pc must follow in the walk in the same order. It also
// checks the notes only Linux writes (NT_FILE, NT_ARM_PAC_MASK).
func TestKernelWrittenCore(t *testing.T) {
	b := gunzip(t, kernelCore+"/core.gz")
	exe, err := os.ReadFile(kernelCore + "/crash")
	if err != nil {
		t.Fatal(err)
	}
	co, err := core.Load("core.gz", bytes.NewReader(b), int64(len(b)), core.ObjectFile{Path: kernelCore + "/crash", Data: exe})
	if err != nil {
		t.Fatal(err)
	}
	if len(co.Threads) != 1 || co.Threads[0].Signal != 11 {
		t.Fatalf("threads %+v, want one thread killed by SIGSEGV", co.Threads)
	}
	if len(co.Files) == 0 {
		t.Error("no NT_FILE mappings in a core Linux wrote")
	}
	if !co.HasPACMask {
		t.Error("no NT_ARM_PAC_MASK in a core Linux wrote on a PAC-capable CPU")
	}

	gdb, err := os.ReadFile(kernelCore + "/gdb-bt.txt")
	if err != nil {
		t.Fatal(err)
	}
	// "#1  0x00000000004006f4 in level3 (...)"
	re := regexp.MustCompile(`(?m)^#(\d+)\s+0x([0-9a-f]+) in (\w+)`)
	type gframe struct {
		pc   uint64
		name string
	}
	var want []gframe
	seen := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(string(gdb), -1) {
		if seen[m[1]] { // gdb printed the backtrace once per command
			continue
		}
		seen[m[1]] = true
		pc, _ := strconv.ParseUint(m[2], 16, 64)
		want = append(want, gframe{pc, m[3]})
	}
	if len(want) < 3 {
		t.Fatalf("gdb-bt.txt has %d frames with a pc, want at least 3", len(want))
	}

	th := &co.Threads[0]
	frames, err := co.Frames(th, unwind.MethodFP)
	if err != nil {
		t.Fatalf("FP walk: %v (frames %v)", err, frames)
	}
	if len(frames) == 0 || frames[0].PC != th.Regs.PC {
		t.Fatalf("FP walk does not start at the crashing pc %#x: %v", th.Regs.PC, frames)
	}
	// gdb's frame 1 comes from the call frame information: the leaf's
	// caller is only in x30, which neither technique reads.
	x30, ok := co.X30Only(th)
	if !ok || x30 != want[0].pc {
		t.Errorf("X30Only = %#x, %v; gdb's frame 1 is %#x (%s)", x30, ok, want[0].pc, want[0].name)
	}
	i := 1
	for _, f := range frames[1:] {
		if i < len(want) && f.PC == want[i].pc {
			if got := co.Symbolizer().Func(f.PC); got != want[i].name {
				t.Errorf("frame at %#x is %q, gdb says %q", f.PC, got, want[i].name)
			}
			i++
		}
	}
	t.Logf("gdb frames %v matched in the FP walk up to #%d", want, i)
	if i != len(want) {
		t.Errorf("FP walk %v holds gdb's frames only up to #%d of %d", frames, i, len(want))
	}
}
