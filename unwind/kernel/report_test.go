package kernel_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
)

// A report of every task keeps each task's frames, not the stack bytes
// each walk read (THREAD_SIZE per task): the heap a report of the sysrq-t
// stop retains, per task, stays well below THREAD_SIZE (the old code held
// each task's 16 KiB stack and each CPU's stacks).
func TestReportRetainsFramesOnly(t *testing.T) {
	cp, err := kcapture.OpenCapture("../../testdata/kernel/deb-6.12")
	if err != nil {
		t.Fatal(err)
	}
	var stop *kcapture.Stop
	for i := range cp.Expected.Stops {
		if cp.Expected.Stops[i].Name == "t" {
			stop = &cp.Expected.Stops[i]
		}
	}
	k, err := cp.Kernel(stop)
	if err != nil {
		t.Fatal(err)
	}
	k.Unwind(true) // whatever the kernel caches on first use
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	rep := k.Unwind(true)
	runtime.GC()
	runtime.ReadMemStats(&b)
	frames := 0
	for _, tr := range rep.Tasks {
		frames += len(tr.Frames) + len(tr.SCS)
	}
	retained := int64(b.HeapAlloc) - int64(a.HeapAlloc)
	per := retained / int64(len(rep.Tasks))
	t.Logf("%d tasks, %d frames: %d bytes retained, %d per task (THREAD_SIZE %d)", len(rep.Tasks), frames, retained, per, k.ThreadSize)
	if len(rep.Tasks) < 50 {
		t.Fatalf("%d tasks", len(rep.Tasks))
	}
	if per > int64(k.ThreadSize)/4 {
		t.Errorf("a report retains %d bytes per task (THREAD_SIZE %d)", per, k.ThreadSize)
	}
	// The walks it keeps still run, reading the dump again.
	tr := rep.Tasks[len(rep.Tasks)-1]
	if fs, _, err := tr.Walk.Run(); fmt.Sprint(err) != fmt.Sprint(tr.Err) || fmt.Sprint(fs) != fmt.Sprint(tr.Frames) {
		t.Errorf("walk again: %x, %v; reported %x, %v", fs, err, tr.Frames, tr.Err)
	}
	runtime.KeepAlive(rep)
}
