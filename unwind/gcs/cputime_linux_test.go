package gcs_test

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// cpuClock returns a stop function giving the calling thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID) in ns since the call, the thread locked
// meanwhile: the time a busy machine makes the benchmark wait for a core
// is not counted, as it is in wall time.
func cpuClock() (stop func() int64) {
	runtime.LockOSThread()
	t0 := threadCPU()
	return func() int64 {
		d := threadCPU() - t0
		runtime.UnlockOSThread()
		return d
	}
}

func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
