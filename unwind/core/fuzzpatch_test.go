package core_test

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/unwindkit/unwindkit/internal/elfcore"
	"github.com/unwindkit/unwindkit/internal/fuzzpatch"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
)

// patchCores are the real cores FuzzPatchLoad edits (qemu-aarch64 cores
// of clang and GCC programs, with and without PAC, a signal and a leaf
// crash; Linux 7.2's core of the GCS program's signal scenario, with
// NT_ARM_GCS and the GCS mapping), each with its executable (for the GCS
// core its symbol table, mapped as "gcs"), which is not edited.
var patchCores = []struct{ core, exe, name string }{
	{dir + "/cores/clang-pacret-pauth-signal.core.gz", dir + "/bin/clang-pacret.elf.gz", "clang-pacret.elf"},
	{dir + "/cores/gcc-nopac-nopauth-leaf.core.gz", dir + "/bin/gcc-nopac.elf.gz", "gcc-nopac.elf"},
	{dir + "/cores/gcc-pacret-nopauth-qsort.core.gz", dir + "/bin/gcc-pacret.elf.gz", "gcc-pacret.elf"},
	{dir + "/cores/clang-nopac-nopauth-recurse.core.gz", dir + "/bin/clang-nopac.elf.gz", "clang-nopac.elf"},
	{gcsCores + "/signal.core.gz", gcsCores + "/gcs-core.sym.gz", "gcs"},
}

type patchCore struct {
	core []byte
	exe  core.ObjectFile
}

var patchCoreFiles = sync.OnceValue(func() []patchCore {
	var out []patchCore
	for _, c := range patchCores {
		out = append(out, patchCore{
			core: fuzzpatch.Read(patchPanicTB{}, c.core),
			exe:  core.ObjectFile{Path: c.name, Data: fuzzpatch.Read(patchPanicTB{}, c.exe)},
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
// unwinders on every thread, copies its GCS and trims a copy: no panic, and a trimmed copy
// of a loadable core loads.
func FuzzPatchLoad(f *testing.F) {
	for i, c := range patchCoreFiles() {
		for _, s := range fuzzpatch.Seeds(c.core, 12) {
			f.Add(uint8(i<<1), s)
		}
		f.Add(uint8(i<<1|1), []byte{})
		// The GCS core's NT_ARM_GCS: gcspr_el0 into no segment, into
		// the stack, misaligned; GCS off; a short descsz.
		if ec, err := elfcore.Parse("seed", bytes.NewReader(c.core), int64(len(c.core)), false); err == nil {
			for _, n := range ec.Notes {
				if n.Name != "LINUX" || n.Type != 0x410 {
					continue
				}
				at := uint32(n.DescOff)
				u := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
				for _, p := range [][]byte{
					fuzzpatch.Edit(at+16, u(0x1000)),
					fuzzpatch.Edit(at+16, u(0xfffffffff000)),
					fuzzpatch.Edit(at+16, u(binary.LittleEndian.Uint64(n.Desc[16:])+4)),
					fuzzpatch.Edit(at, u(0)),
					fuzzpatch.Edit(at-16, []byte{16}), // descsz ("LINUX\0" padded to 8 before the desc)
				} {
					f.Add(uint8(i<<1), p)
				}
			}
		}
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
			co.Frames(&co.Threads[i], unwind.MethodGCS)
		}
		var out bytes.Buffer
		if err := core.Trim(&out, "fuzz.core", bytes.NewReader(b), int64(len(b)), [][2]uint64{{0, 1 << 62}}); err == nil {
			if _, err := core.Load("trimmed.core", bytes.NewReader(out.Bytes()), int64(out.Len())); err != nil {
				t.Fatalf("trimmed copy of a valid core does not load: %v", err)
			}
		}
	})
}
