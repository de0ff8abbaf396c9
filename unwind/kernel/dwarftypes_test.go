package kernel_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind/debuginfo"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

const cuFile = "../../testdata/debuginfo/vmlinux-6.1-cu0.debug.gz"

// dwarfSources opens the DWARF of Debian's 6.1 cloud kernel (the build of
// deb-6.1-mod): the shipped vmlinux-6.1-cu0.debug.gz, the first
// compilation unit of its -dbg vmlinux cut out by testdata/kernel/dwarfcu
// (it defines every struct unwind/kernel reads), and, when
// DEBUGINFO_VMLINUX names it, the whole 273 MB vmlinux, not shipped.
func dwarfSources(t *testing.T) map[string]*debuginfo.File {
	t.Helper()
	raw, err := os.ReadFile(cuFile)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, 16<<20))
	if err != nil {
		t.Fatal(err)
	}
	cu, err := debuginfo.NewFile(cuFile, bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*debuginfo.File{"cu0": cu}
	if path := os.Getenv("DEBUGINFO_VMLINUX"); path != "" {
		f, err := debuginfo.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		out["vmlinux"] = f
	} else {
		t.Log("DEBUGINFO_VMLINUX not set: the shipped unit only (set it to the -dbg vmlinux of linux-image-6.1.0-57-cloud-arm64-dbg for the whole file)")
	}
	t.Cleanup(func() {
		for _, f := range out {
			f.Close()
		}
	})
	return out
}

// dumpBTF is the BTF of deb-6.1-mod's kernel, read from its dump (the
// first stop's vmcore holds it): what the running kernel carried.
func dumpBTF(t *testing.T) *vmcore.BTF {
	t.Helper()
	cp, err := kcapture.OpenCapture(modCapture)
	if err != nil {
		t.Fatal(err)
	}
	k, err := cp.Kernel(&cp.Expected.Stops[0])
	if err != nil {
		t.Fatal(err)
	}
	if k.BTF == nil {
		t.Fatal("no BTF in the first stop's vmcore")
	}
	return k.BTF
}

// typeKeys are every structure offset and size unwind/kernel reads: the
// vmcore's OffsetKeys, the task list's members and the module list's.
var typeKeys = append(append([]string(nil), vmcore.OffsetKeys...),
	"task_struct.tasks", "task_struct.pid", "task_struct.comm", "task_struct.__state",
	"module.list", "module.name", "module.state", "module.kallsyms", "module.core_layout",
	"module_layout.base", "module_layout.size", "module_layout.text_size",
	"mod_kallsyms.symtab", "mod_kallsyms.num_symtab", "mod_kallsyms.strtab", "mod_kallsyms.typetab",
	"sizeof(task_struct)", "sizeof(thread_info)", "sizeof(cpu_context)", "sizeof(module)",
	// members of anonymous unions and structs, and a bitfield
	"thread_info.preempt_count", "thread_info.preempt.need_resched", "task_struct.sched_reset_on_fork")

// TestDWARFOffsetsEqualBTF checks the structure offsets debuginfo.Types
// derives from the vmlinux's DWARF against the kernel's BTF (pahole's,
// from the same build, read from the dump) for every key unwind/kernel
// reads, and a few through anonymous unions: equal values, and the same
// keys unknown (thread_info.scs_base and scs_sp: Debian's kernel has no
// shadow call stacks; task_struct.sched_reset_on_fork: a bitfield).
func TestDWARFOffsetsEqualBTF(t *testing.T) {
	btf := dumpBTF(t)
	for name, f := range dwarfSources(t) {
		t.Run(name, func(t *testing.T) { offsetsEqual(t, btf, f.Types()) })
	}
}

func offsetsEqual(t *testing.T, btf *vmcore.BTF, dw *debuginfo.Types) {
	unknown := 0
	for _, key := range typeKeys {
		get := func(ty vmcore.Types) (uint64, error) {
			if n, ok := strings.CutPrefix(key, "sizeof("); ok {
				return ty.Size(strings.TrimSuffix(n, ")"))
			}
			return ty.Offset(key)
		}
		b, berr := get(btf)
		d, derr := get(dw)
		switch {
		case (berr == nil) != (derr == nil):
			t.Errorf("%s: BTF %d (%v), DWARF %d (%v)", key, b, berr, d, derr)
		case berr != nil:
			unknown++
			t.Logf("%s: unknown to both (BTF: %v; DWARF: %v)", key, berr, derr)
		case b != d:
			t.Errorf("%s: BTF %d, DWARF %d", key, b, d)
		}
	}
	if unknown != 3 {
		t.Errorf("%d keys unknown to both, want 3 (thread_info.scs_base, scs_sp, the bitfield)", unknown)
	}
}

// TestBTFLessDumpWithDWARF checks that a dump without BTF unwinds with the
// vmlinux's DWARF for its structure offsets: the sysrq-t stop of
// deb-6.1-mod opened without the BTF the capture ships in its first stop
// (the trimmed t.vmcore.gz does not hold its own, so the search finds
// none) gives, with Options.Types from DWARF, the same walk of every CPU
// and task as with BTF, module frames named as well; and without it no
// task unwinds.
func TestBTFLessDumpWithDWARF(t *testing.T) {
	for name, f := range dwarfSources(t) {
		t.Run(name, func(t *testing.T) { btfLess(t, f) })
	}
}

func btfLess(t *testing.T, f *debuginfo.File) {
	cp, s := modStop(t)
	withBTF, err := cp.Kernel(s)
	if err != nil {
		t.Fatal(err)
	}
	want := withBTF.Unwind(true)
	open := func(opts kernel.Options) *kernel.Kernel {
		v, err := cp.Vmcore(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		k, err := kernel.New(v, cp.Syms, opts)
		if err != nil {
			t.Fatal(err)
		}
		if k.BTF != nil {
			t.Fatal("the trimmed t.vmcore.gz holds a BTF: the test would not test DWARF")
		}
		return k
	}
	if rep := open(kernel.Options{}).Unwind(true); rep.TasksErr == nil || len(rep.Tasks) != 0 {
		t.Errorf("no BTF, no DWARF: %d tasks, %v; want none and an error", len(rep.Tasks), rep.TasksErr)
	}
	k := open(kernel.Options{Types: f.Types()})
	if k.Types == nil || k.Types.Origin() != "dwarf" {
		t.Fatalf("Types %v", k.Types)
	}
	got := k.Unwind(true)
	if got.TasksErr != nil || len(got.Tasks) != len(want.Tasks) || len(want.Tasks) < 50 {
		t.Fatalf("DWARF: %d tasks (%v), BTF: %d", len(got.Tasks), got.TasksErr, len(want.Tasks))
	}
	frames, mod := 0, 0
	for i := range want.Tasks {
		a, b := &want.Tasks[i], &got.Tasks[i]
		if a.Task != b.Task || !reflect.DeepEqual(a.Frames, b.Frames) || a.End != b.End {
			t.Errorf("task %d %s: DWARF walk differs from BTF's: %v / %v", a.Task.PID, a.Task.Comm, b.Err, a.Err)
		}
		for _, fr := range b.Frames {
			frames++
			if strings.HasSuffix(k.Format(fr.PC), " [ukit]") {
				mod++
			}
		}
	}
	for i := range want.CPUs {
		if !reflect.DeepEqual(want.CPUs[i].Frames, got.CPUs[i].Frames) {
			t.Errorf("cpu %d: DWARF walk differs from BTF's", i)
		}
	}
	if mod != 4 {
		t.Errorf("%d module frames named with DWARF offsets, want 4", mod)
	}
	t.Logf("%d tasks, %d frames, %d in the module, equal with DWARF offsets and BTF", len(got.Tasks), frames, mod)
}
