//go:build unix

package kernel_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// BenchmarkFullDump times what drgn's for_each_task + stack_trace does
// (testdata/kernel/drgnframes.py -walk), on a FULL raw vmcore: every CPU
// and every task of the task list walked and each frame named (%pS).
// It is opt-in, the dump being 256 MiB and outside git:
//
//	UNWINDKIT_FULL_VMCORE=$KCAP/captures/deb-6.1-mod/t.vmcore \
//	UNWINDKIT_SYSTEM_MAP=.../System.map-6.1.0-57-cloud-arm64 \
//	go test ./unwind/kernel -run '^$' -bench FullDump -benchtime 20x
//
// "walk" is the unwinding and naming of a prepared kernel (drgn's walk
// after its open and debug info load); "open-walk" adds vmcore.Open, the
// dump's kallsyms, the System.map merge and kernel.New. Besides ns/op it
// reports cpu-ms/op (user + system time of the process per op), which a
// loaded machine inflates less than wall time.
func BenchmarkFullDump(b *testing.B) {
	path, sm := os.Getenv("UNWINDKIT_FULL_VMCORE"), os.Getenv("UNWINDKIT_SYSTEM_MAP")
	if path == "" || sm == "" {
		b.Skip("UNWINDKIT_FULL_VMCORE and UNWINDKIT_SYSTEM_MAP not set (a full raw vmcore and its System.map)")
	}
	f, err := os.Open(sm)
	if err != nil {
		b.Fatal(err)
	}
	extra, err := vmcore.ParseSystemMap(sm, f)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	open := func() (*kernel.Kernel, func()) {
		v, err := vmcore.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		syms, err := v.Kallsyms()
		if err != nil {
			b.Fatal(err)
		}
		k, err := kernel.New(v, kernel.MergeDataSyms(syms, extra), kernel.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return k, func() { v.Close() }
	}
	walk := func(k *kernel.Kernel) int {
		rep := k.Unwind(true)
		n := 0
		for _, r := range rep.CPUs {
			for _, f := range r.Frames {
				n += len(k.Format(f.PC))
			}
		}
		for _, r := range rep.Tasks {
			for _, f := range r.Frames {
				n += len(k.Format(f.PC))
			}
		}
		if len(rep.Tasks) < 2 || n == 0 {
			b.Fatalf("%d tasks, %d bytes of names", len(rep.Tasks), n)
		}
		return n
	}
	b.Run("walk", func(b *testing.B) {
		k, done := open()
		defer done()
		walk(k)
		c := cpuTime()
		for b.Loop() {
			walk(k)
		}
		b.ReportMetric(float64(cpuTime()-c)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	})
	b.Run("open-walk", func(b *testing.B) {
		c := cpuTime()
		for b.Loop() {
			k, done := open()
			walk(k)
			done()
		}
		b.ReportMetric(float64(cpuTime()-c)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	})
}

// cpuTime is the process's user + system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
