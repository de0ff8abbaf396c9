//go:build !linux

package gcs_test

// cpuClock reports 0 where the thread's CPU time is not available.
func cpuClock() (stop func() int64) { return func() int64 { return 0 } }
