package kernel_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// flatMem is memory [base, base+len(b)).
type flatMem struct {
	base uint64
	b    []byte
}

func (m *flatMem) ReadVirt(b []byte, va uint64) error {
	if va < m.base || va-m.base > uint64(len(m.b)) || uint64(len(b)) > uint64(len(m.b))-(va-m.base) {
		return fmt.Errorf("va %#x not mapped", va)
	}
	copy(b, m.b[va-m.base:])
	return nil
}

// FuzzWalk walks arbitrary stack contents under both ABIs: no panic, no
// endless walk, and a successful end only at the task's final record.
func FuzzWalk(f *testing.F) {
	seed := make([]byte, 512)
	binary.LittleEndian.PutUint64(seed[0:], 0x1000+0x40)
	binary.LittleEndian.PutUint64(seed[8:], 0x1234)
	f.Add(seed, uint64(0x1000), uint16(0x100), false)
	f.Add(seed, uint64(0x1000), uint16(0x1b0), true)
	f.Fuzz(func(t *testing.T, data []byte, start uint64, final uint16, meta bool) {
		if len(data) > 1<<16 {
			return
		}
		m := &flatMem{base: 0x1000, b: data}
		half := uint64(len(data)/2) &^ 7
		abi := fp.ABIFinalRecord
		if meta {
			abi = fp.ABIMetaRecord
		}
		w := &kernel.Walk{Mem: m, ABI: abi, Regs: fp.PtRegsLayout{Size: 336, X29: 232, PC: 256, StackFrame: 304},
			Stacks: []kernel.Stack{
				{Low: 0x1000, High: 0x1000 + half, Kind: fp.IRQ},
				{Low: 0x1000 + half, High: 0x1000 + 2*half, Kind: fp.Task},
			},
			TaskPtRegs: 0x1000 + uint64(final), FP: start, PC: 1, Max: 64}
		fs, end, err := w.Run()
		if len(fs) > 64 || len(fs) == 0 {
			t.Fatalf("%d frames", len(fs))
		}
		if (err == nil) == (end == fp.EndError) {
			t.Fatalf("end %v with error %v", end, err)
		}
		if end == fp.EndFinal && !meta && len(fs) > 1 && fs[len(fs)-1].FP != w.TaskPtRegs+304 {
			t.Fatalf("final end at fp %#x", fs[len(fs)-1].FP)
		}
	})
}

// fuzzCaptures are the captures FuzzKernelDump seeds from: a kernel
// without and one with shadow call stacks, and one with meta records.
var fuzzCaptures = []string{"../../testdata/kernel/deb-6.12", "../../testdata/kernel/scs-6.12", "../../testdata/kernel/deb-7.2"}

type fuzzKernel struct {
	cp  *kcapture.Capture
	btf *vmcore.BTF
}

var fuzzKernels = sync.OnceValues(func() ([]fuzzKernel, error) {
	var out []fuzzKernel
	for _, d := range fuzzCaptures {
		cp, err := kcapture.OpenCapture(d)
		if err != nil {
			return nil, err
		}
		k, err := cp.Kernel(&cp.Expected.Stops[0])
		if err != nil {
			return nil, err
		}
		out = append(out, fuzzKernel{cp, k.BTF})
	}
	return out, nil
})

// FuzzKernelDump prepares and unwinds arbitrary vmcores with both
// techniques, reads the stopped CPUs' prologues and compares (seeded with
// the shipped IPI dumps of a 6.12 kernel without and one with shadow call
// stacks and of a 7.2 kernel (meta records), and the SCS kernel's stop
// inside a prologue, each with the BTF of its boot): no panic.
func FuzzKernelDump(f *testing.F) {
	ks, err := fuzzKernels()
	if err != nil {
		f.Fatal(err)
	}
	for i, d := range fuzzCaptures {
		for _, stop := range []string{"l-ipi", "x30"} {
			zf, err := os.Open(d + "/" + stop + ".vmcore.gz")
			if os.IsNotExist(err) && stop == "x30" {
				continue
			}
			if err != nil {
				f.Fatal(err)
			}
			zr, err := gzip.NewReader(zf)
			if err != nil {
				f.Fatal(err)
			}
			seed, err := io.ReadAll(zr)
			zf.Close()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(seed, uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		fk := ks[int(which)%len(ks)]
		v, err := vmcore.Load("fuzz", bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		k, err := kernel.New(v, fk.cp.Syms, kernel.Options{BTF: fk.btf, BTFFrom: "fuzz"})
		if err != nil {
			return
		}
		rep := k.Unwind(true)
		for _, c := range rep.CPUs {
			if k.Compare(c.SCS, c.Frames, c.SCSErr, c.Err).String() == "" {
				t.Fatal("empty comparison")
			}
		}
	})
}
