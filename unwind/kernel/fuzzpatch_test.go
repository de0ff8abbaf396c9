package kernel_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/unwindkit/unwindkit/internal/fuzzpatch"
	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// patchStops are the shipped dumps FuzzPatchNew edits: IPI stops of a
// 6.12 kernel without and one with shadow call stacks, the SCS kernel's
// stop inside a prologue, a 6.1 IPI stop (each with the BTF of its boot,
// not edited), one first stop whose own BTF kernel.New reads (edited
// with the rest of the dump), the sysrq-t stop of a kernel with a
// loaded module (Kernel.Modules and the naming of module frames), and
// the sysrq-t stop of 7.2 with a dynamic shadow call stack (meta records,
// and Kernel.SCSState reading dynamic_scs_enabled from the dump).
var patchStops = []struct {
	dir, stop string
	ownBTF    bool
}{
	{"../../testdata/kernel/deb-6.12", "l-ipi", false},
	{"../../testdata/kernel/scs-6.12", "l-ipi", false},
	{"../../testdata/kernel/scs-6.12", "x30", false},
	{"../../testdata/kernel/deb-6.1", "l-ipi", false},
	{"../../testdata/kernel/scs-6.1", "l-syscall", true},
	{"../../testdata/kernel/deb-6.1-mod", "t", false}, // the module list and its symbols
	{"../../testdata/kernel/scs-7.2", "t", false},     // meta records; the dynamic SCS's static key
}

type patchStop struct {
	dump []byte
	cp   *kcapture.Capture
	btf  *vmcore.BTF // nil: the dump's own
}

var patchStopFiles = sync.OnceValues(func() ([]patchStop, error) {
	var out []patchStop
	for _, s := range patchStops {
		cp, err := kcapture.OpenCapture(s.dir)
		if err != nil {
			return nil, err
		}
		p := patchStop{dump: fuzzpatch.Read(patchPanicTB{}, s.dir+"/"+s.stop+".vmcore.gz"), cp: cp}
		if !s.ownBTF {
			k, err := cp.Kernel(&cp.Expected.Stops[0])
			if err != nil {
				return nil, err
			}
			p.btf = k.BTF
		}
		out = append(out, p)
	}
	return out, nil
})

// patchPanicTB fails a sync.OnceValues by panicking.
type patchPanicTB struct{}

func (patchPanicTB) Helper()                        {}
func (patchPanicTB) Fatalf(format string, a ...any) { panic(format) }

// FuzzPatchNew prepares real vmcores with a few bytes changed (a patch
// list, internal/fuzzpatch) with kernel.New, unwinds every CPU and task
// with both techniques and compares them: no panic, and every comparison
// says something.
func FuzzPatchNew(f *testing.F) {
	ss, err := patchStopFiles()
	if err != nil {
		f.Fatal(err)
	}
	for i, s := range ss {
		for _, p := range fuzzpatch.Seeds(s.dump, 5) {
			f.Add(uint8(i), p)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, patch []byte) {
		ss, _ := patchStopFiles()
		s := ss[int(which)%len(ss)]
		b := fuzzpatch.Apply(s.dump, patch)
		v, err := vmcore.Load("fuzz.vmcore", bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		opts := kernel.Options{}
		if s.btf != nil {
			opts = kernel.Options{BTF: s.btf, BTFFrom: "fuzz-btf"}
		}
		k, err := kernel.New(v, s.cp.Syms, opts)
		if err != nil {
			return
		}
		rep := k.Unwind(true)
		mods, _ := k.Modules()
		for _, m := range mods {
			if len(m.Syms) > 1<<18 || len(m.Name) > 56 {
				t.Fatalf("module %q: %d symbols", m.Name, len(m.Syms))
			}
		}
		for _, r := range rep.Tasks {
			for _, f := range r.Frames {
				if k.Format(f.PC) == "" {
					t.Fatal("empty name")
				}
			}
		}
		for _, c := range rep.CPUs {
			if k.Compare(c.SCS, c.Frames, c.SCSErr, c.Err).String() == "" {
				t.Fatal("empty comparison")
			}
		}
	})
}
