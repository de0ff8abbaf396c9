package debuginfo_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/debuginfo"
)

// TestLazy: a lookup decodes the one unit holding its pc; gcc's
// .debug_aranges finds it without the scan, clang's (no aranges) needs
// the scan, once. A lookup in a decoded unit allocates only its frames.
func TestLazy(t *testing.T) {
	for _, c := range []struct {
		bin         string
		pcMain      uint64 // in main.c (run)
		wantScanned bool
	}{
		{"gcc-dwarf5", 0x400388, false},
		{"clang-dwarf5", 0x210204, true},
	} {
		file := filepath.Join(t.TempDir(), c.bin+".elf")
		if err := os.WriteFile(file, gunzip(t, testdata+"/bin/"+c.bin+".elf.gz"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := debuginfo.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := debuginfo.DecodedUnits(f); n != 0 {
			t.Errorf("%s: Open decoded %d units", c.bin, n)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		frames, err := f.Lookup(c.pcMain, debuginfo.PC)
		runtime.ReadMemStats(&after)
		if err != nil || len(frames) < 2 {
			t.Fatalf("%s: %#x: %v %v", c.bin, c.pcMain, frames, err)
		}
		n, scanned := debuginfo.DecodedUnits(f)
		if n != 1 || scanned != c.wantScanned {
			t.Errorf("%s: after one lookup: %d units decoded, scanned %v; want 1, %v", c.bin, n, scanned, c.wantScanned)
		}
		first := after.TotalAlloc - before.TotalAlloc
		if first > 1<<20 {
			t.Errorf("%s: the first lookup allocated %d bytes", c.bin, first)
		}
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := f.Lookup(c.pcMain, debuginfo.PC); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 1 {
			t.Errorf("%s: a lookup in a decoded unit: %v allocations, want 1 (the frames)", c.bin, allocs)
		}
		t.Logf("%s: first lookup %d bytes allocated; then %v allocations a lookup", c.bin, first, allocs)
		f.Close()
		if _, err := f.Lookup(c.pcMain, debuginfo.PC); err == nil {
			t.Errorf("%s: Lookup after Close succeeded", c.bin)
		}
	}
}
