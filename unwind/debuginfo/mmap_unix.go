//go:build unix

package debuginfo

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps fh read-only. A file too large for the address space, or
// empty, is not mapped (nil, nil, nil): it is then read on demand.
func mapFile(fh *os.File, size int64) ([]byte, func() error, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, nil
	}
	mem, err := unix.Mmap(int(fh.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return mem, func() error { return unix.Munmap(mem) }, nil
}
