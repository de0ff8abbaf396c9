package core_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/unwindkit/unwindkit/internal/fuzzpatch"
	"github.com/unwindkit/unwindkit/unwind/core"
)

// patchCores are the real cores FuzzPatchLoad edits (qemu-aarch64 cores
// of clang and GCC programs, with and without PAC, a signal and a leaf
// crash), each with its executable, which is not edited.
var patchCores = []struct{ core, exe string }{
	{"clang-pacret-pauth-signal.core.gz", "clang-pacret.elf.gz"},
	{"gcc-nopac-nopauth-leaf.core.gz", "gcc-nopac.elf.gz"},
	{"gcc-pacret-nopauth-qsort.core.gz", "gcc-pacret.elf.gz"},
	{"clang-nopac-nopauth-recurse.core.gz", "clang-nopac.elf.gz"},
}

type patchCore struct {
	core []byte
	exe  core.ObjectFile
}

var patchCoreFiles = sync.OnceValue(func() []patchCore {
	var out []patchCore
	for _, c := range patchCores {
		out = append(out, patchCore{
			core: fuzzpatch.Read(patchPanicTB{}, dir+"/cores/"+c.core),
			exe:  core.ObjectFile{Path: c.exe[:len(c.exe)-len(".gz")], Data: fuzzpatch.Read(patchPanicTB{}, dir+"/bin/"+c.exe)},
		})
	}
	return out
})

// patchPanicTB fails a sync.OnceValue by panicking.
type patchPanicTB struct{}

func (patchPanicTB) Helper()                        {}
func (patchPanicTB) Fatalf(format string, a ...any) { panic(format) }

// FuzzPatchLoad loads real cores with a few bytes changed (a patch list,
// internal/fuzzpatch), with and without their executable, compares both
// unwinders on every thread and trims a copy: no panic, and a trimmed copy
// of a loadable core loads.
func FuzzPatchLoad(f *testing.F) {
	for i, c := range patchCoreFiles() {
		for _, s := range fuzzpatch.Seeds(c.core, 12) {
			f.Add(uint8(i<<1), s)
		}
		f.Add(uint8(i<<1|1), []byte{})
	}
	f.Fuzz(func(t *testing.T, which uint8, patch []byte) {
		cs := patchCoreFiles()
		c := cs[int(which>>1)%len(cs)]
		b := fuzzpatch.Apply(c.core, patch)
		var objs []core.ObjectFile
		if which&1 == 0 {
			objs = append(objs, c.exe)
		}
		co, err := core.Load("fuzz.core", bytes.NewReader(b), int64(len(b)), objs...)
		if err != nil {
			return
		}
		for i := range co.Threads {
			co.Compare(&co.Threads[i])
		}
		var out bytes.Buffer
		if err := core.Trim(&out, "fuzz.core", bytes.NewReader(b), int64(len(b)), [][2]uint64{{0, 1 << 62}}); err == nil {
			if _, err := core.Load("trimmed.core", bytes.NewReader(out.Bytes()), int64(out.Len())); err != nil {
				t.Fatalf("trimmed copy of a valid core does not load: %v", err)
			}
		}
	})
}
