//go:build !linux

package scs

import "testing"

// cpuTimer reports nothing where the thread's CPU time is not available.
type cpuTimer struct{}

func startCPU(*testing.B) cpuTimer { return cpuTimer{} }

func (cpuTimer) stop() {}
