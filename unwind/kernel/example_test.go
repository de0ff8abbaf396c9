package kernel_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// gunzip reads the gzip file at path, at most limit bytes decompressed.
func gunzip(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes decompressed", path, limit)
	}
	return b, nil
}

// open loads the gzip-compressed vmcore at path and prepares it.
func open(path string, syms []vmcore.KSym, opts kernel.Options) (*kernel.Kernel, error) {
	b, err := gunzip(path, 64<<20)
	if err != nil {
		return nil, err
	}
	v, err := vmcore.Load(path, bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	return kernel.New(v, syms, opts)
}

// Example unwinds the CPU that Debian's 6.12 kernel interrupted with the
// sysrq-l IPI (CPU 0 of the trimmed dump l-ipi.vmcore.gz), from its
// dumped registers, with the symbols of /proc/kallsyms. The kernel
// printed the same trace from finish_task_switch on (its walk starts in
// the IPI's printing code, which ran after the dump).
func Example() {
	const dir = "../../testdata/kernel/deb-6.12/"
	text, err := gunzip(dir+"syms.txt.gz", 64<<20)
	if err != nil {
		fmt.Println(err)
		return
	}
	syms, err := vmcore.ParseKallsyms(bytes.NewReader(text))
	if err != nil {
		fmt.Println(err)
		return
	}
	// The trimmed dumps ship the BTF once, in the boot's first dump: the
	// others take it from there (New checks it is the same build).
	k0, err := open(dir+"l-syscall.vmcore.gz", syms, kernel.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	k, err := open(dir+"l-ipi.vmcore.gz", syms, kernel.Options{BTF: k0.BTF, BTFFrom: "l-syscall.vmcore.gz", BTFBuild: k0.Build()})
	if err != nil {
		fmt.Println(err)
		return
	}
	w, err := k.CPUWalk(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fs, end, err := w.Run()
	fmt.Println(k.ABI, "|", len(fs), "frames, final:", end == fp.EndFinal, err)
	fmt.Println("frame 11:", fs[11].Origin, k.Format(fs[11].PC))
	fmt.Println("last:", k.Format(fs[len(fs)-1].PC))
	// Output:
	// final-record | 19 frames, final: true <nil>
	// frame 11: regs-pc finish_task_switch.isra.0+0x7c/0x2a8
	// last: ret_from_fork+0x10/0x20
}
