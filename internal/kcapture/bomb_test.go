package kcapture_test

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/internal/kcapture"
)

// gzipZeros returns a gzip file of n MiB of zeros: n concatenated members
// of 1 MiB each (a gzip reader reads them as one stream), cheap to build.
func gzipZeros(t *testing.T, n int) []byte {
	t.Helper()
	var m bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&m, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.Repeat(m.Bytes(), n)
}

// allocated runs f and returns the bytes it allocated and its wall time.
func allocated(f func()) (uint64, time.Duration) {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	t0 := time.Now()
	f()
	d := time.Since(t0)
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc, d
}

// A gzip bomb as a capture's vmcore (257 MiB of zeros in 271 KB, more
// than the 256 MiB limit) is rejected while inflating, before a buffer is
// allocated: the old code read it with io.ReadAll up to the limit and
// allocated 572 MiB.
func TestCaptureVmcoreBomb(t *testing.T) {
	dir := t.TempDir()
	bomb := gzipZeros(t, 257)
	if err := os.WriteFile(filepath.Join(dir, "bomb.vmcore.gz"), bomb, 0o644); err != nil {
		t.Fatal(err)
	}
	cp := &kcapture.Capture{Dir: dir}
	var err error
	alloc, d := allocated(func() { _, err = cp.Vmcore("bomb") })
	t.Logf("%d-byte bomb: %v, %d bytes allocated, %v", len(bomb), err, alloc, d)
	if err == nil || !strings.Contains(err.Error(), "bomb.vmcore.gz") || !strings.Contains(err.Error(), "decompressed") {
		t.Errorf("bomb: %v", err)
	}
	if alloc > 32<<20 { // memory, not time: the machine's load does not move it
		t.Errorf("bomb of %d bytes cost %d bytes of allocation and %v", len(bomb), alloc, d)
	}
}

// The shipped trimmed vmcores load with one allocation of their size:
// the largest, 4.7 MiB from 1.5 MB, allocates little more than that.
func TestCaptureVmcoreSizedOnce(t *testing.T) {
	cp := &kcapture.Capture{Dir: "../../testdata/kernel/deb-6.12"}
	var err error
	alloc, _ := allocated(func() { _, err = cp.Vmcore("l-syscall") })
	if err != nil {
		t.Fatal(err)
	}
	const size = 4968448
	if alloc > size+size/2 {
		t.Errorf("l-syscall.vmcore.gz (%d bytes decompressed) allocated %d bytes", size, alloc)
	}
}
