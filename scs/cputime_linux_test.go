package scs

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// cpuTimer reports a benchmark's CPU time per operation (cpu-ns/op), the
// calling thread's CLOCK_THREAD_CPUTIME_ID, which a busy machine does not
// inflate the way it inflates wall time (ns/op): the time the thread waits
// for a core is not counted. The benchmark is locked to its thread.
type cpuTimer struct {
	b     *testing.B
	start int64
}

func startCPU(b *testing.B) cpuTimer {
	runtime.LockOSThread()
	return cpuTimer{b, threadCPU()}
}

func (t cpuTimer) stop() {
	d := threadCPU() - t.start
	runtime.UnlockOSThread()
	t.b.ReportMetric(float64(d)/float64(t.b.N), "cpu-ns/op")
}

func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
