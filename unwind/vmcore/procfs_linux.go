package vmcore

import (
	"os"

	"golang.org/x/sys/unix"
)

// onProcfs reports whether f is a file of procfs (/proc/kcore itself).
func onProcfs(f *os.File) bool {
	var st unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &st) != nil {
		return false
	}
	return int64(st.Type) == unix.PROC_SUPER_MAGIC
}
