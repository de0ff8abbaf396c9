package kernel_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// TestSCSUnknownWithoutBTF: a dump of a kernel that has shadow call
// stacks (scs-6.12), opened without BTF, cannot tell whether it has them
// (thread_info.scs_sp is looked up in BTF). The SCS copy must say that
// it does not know, not that the kernel is built without
// CONFIG_SHADOW_CALL_STACK, which would be a wrong answer; the same
// dump with its boot's BTF copies the shadow stack.
func TestSCSUnknownWithoutBTF(t *testing.T) {
	const dir = "../../testdata/kernel/scs-6.12/"
	text, err := gunzip(dir+"syms.txt.gz", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := vmcore.ParseKallsyms(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	k, err := open(dir+"l-ipi.vmcore.gz", syms, kernel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if k.BTF != nil {
		t.Fatalf("l-ipi.vmcore.gz holds BTF; the test needs a stop without it")
	}
	_, _, err = k.SCSCopyCPU(0, nil)
	if err == nil || !errors.Is(err, kernel.ErrNotSupported) {
		t.Fatalf("SCS copy without BTF: %v, want an error wrapping ErrNotSupported", err)
	}
	if strings.Contains(err.Error(), "built without CONFIG_SHADOW_CALL_STACK") || !strings.Contains(err.Error(), "unknown") {
		t.Errorf("SCS copy without BTF: %q: must say whether the kernel has shadow call stacks is unknown", err)
	}

	k0, err := open(dir+"l-syscall.vmcore.gz", syms, kernel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k, err = open(dir+"l-ipi.vmcore.gz", syms, kernel.Options{BTF: k0.BTF, BTFFrom: "l-syscall.vmcore.gz", BTFBuild: k0.Build()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := k.CPUWalk(0)
	if err != nil {
		t.Fatal(err)
	}
	frames, _, _ := w.Run()
	if out, _, err := k.SCSCopyCPU(0, frames); err != nil || len(out) == 0 {
		t.Errorf("SCS copy with the boot's BTF: %d frames, %v", len(out), err)
	}
}
