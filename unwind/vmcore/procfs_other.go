//go:build !linux

package vmcore

import "os"

// onProcfs reports whether f is a file of procfs: never, off Linux.
func onProcfs(f *os.File) bool { return false }
