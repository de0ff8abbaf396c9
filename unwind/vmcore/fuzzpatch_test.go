package vmcore

import (
	"bytes"
	"sync"
	"testing"

	"github.com/unwindkit/unwindkit/internal/fuzzpatch"
)

// patchBases are the real vmcores FuzzPatchLoad edits: trimmed IPI dumps
// of a 6.1 and a 6.12 kernel, a stop inside a prologue on a kernel with
// shadow call stacks, and a 6.1 dump with its kallsyms tables and BTF.
var patchBases = []string{
	"../../testdata/kernel/deb-6.12/l-ipi.vmcore.gz",
	"../../testdata/kernel/deb-6.1/l-ipi.vmcore.gz",
	"../../testdata/kernel/scs-6.12/x30.vmcore.gz",
	"../../testdata/vmcores/debian-6.1.0-57-va48.vmcore.gz",
}

var patchFiles = sync.OnceValue(func() [][]byte {
	var out [][]byte
	for _, p := range patchBases {
		out = append(out, fuzzpatch.Read(panicTB{}, p))
	}
	return out
})

// panicTB fails a sync.OnceValue by panicking (it has no testing.TB).
type panicTB struct{}

func (panicTB) Helper()                        {}
func (panicTB) Fatalf(format string, a ...any) { panic(format) }

// FuzzPatchLoad loads real vmcores with a few bytes changed (a patch list,
// internal/fuzzpatch), reads the stopped CPUs' stacks, decodes kallsyms,
// writes the pages read as a trimmed copy and loads that again: no panic,
// and a trimmed copy of a loadable dump loads.
func FuzzPatchLoad(f *testing.F) {
	for i, b := range patchFiles() {
		for _, s := range fuzzpatch.Seeds(b, 8) {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, patch []byte) {
		bases := patchFiles()
		b := fuzzpatch.Apply(bases[int(which)%len(bases)], patch)
		v, err := loadBytes(b)
		if err != nil {
			return
		}
		v.RecordReads(true)
		for _, c := range v.CPUs {
			v.ReadVirt64(c.Regs.SP)
			v.Translate(c.Regs.X[29])
		}
		syms, _ := v.Kallsyms()
		v.PerCPUOffsets(syms, len(v.CPUs))
		var out bytes.Buffer
		if err := v.WriteTrimmed(&out, v.PagesToRanges(v.PagesRead())); err != nil {
			return
		}
		if _, err := loadBytes(out.Bytes()); err != nil {
			t.Fatalf("trimmed copy of a loadable vmcore does not load: %v", err)
		}
	})
}
