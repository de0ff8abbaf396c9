package debuginfo_test

import (
	"fmt"
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

// TestCrossUnit: gcc's LTO units refer into other units (DW_FORM_ref_addr:
// fail's concrete DIE in unit 0 has its abstract origin in unit 1), so
// their lookups use the whole-section Data, and the names resolve across.
func TestCrossUnit(t *testing.T) {
	b := gunzip(t, testdata+"/bin/gcc-lto.elf.gz")
	f, err := openBytes(t, b)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	frames, err := f.Lookup(0x4000f0, debuginfo.PC)
	if err != nil || len(frames) != 1 || frames[0].Func != "fail" || frames[0].File != "src/main.c" || frames[0].Line != 37 {
		t.Fatalf("got %+v %v, want fail at src/main.c:37", frames, err)
	}
	if !debuginfo.UsesWholeSection(f) {
		t.Errorf("no whole-section Data for a unit with DW_FORM_ref_addr")
	}
	g, _ := openBytes(t, gunzip(t, testdata+"/bin/gcc-dwarf5.elf.gz"))
	if _, err := g.Lookup(0x400388, debuginfo.PC); err != nil || debuginfo.UsesWholeSection(g) {
		t.Errorf("gcc-dwarf5: %v, whole-section Data %v; want per-unit Data", err, debuginfo.UsesWholeSection(g))
	}
}

// TestWholeSectionData: every unit decodes the same through its own Data
// and through the whole-section one (which must seek to the unit's first
// DIE, past its header), and every DIE's ranges as debug/dwarf's Ranges
// reads them.
func TestWholeSectionData(t *testing.T) {
	for _, bin := range binaries(t) {
		f, err := openBytes(t, gunzip(t, bin))
		if err != nil {
			t.Fatal(err)
		}
		offs, err := debuginfo.UnitOffsets(f)
		if err != nil || len(offs) < 2 {
			t.Fatalf("%s: units %v, %v", bin, offs, err)
		}
		debuginfo.CheckRanges(f)
		for _, off := range offs {
			n1, r1, err1 := debuginfo.UnitShape(f, off, false)
			n2, r2, err2 := debuginfo.UnitShape(f, off, true)
			if err1 != nil || err2 != nil || n1 != n2 || r1 != r2 {
				t.Errorf("%s: unit %#x: own Data %d nodes, %d rows, %v; whole %d, %d, %v", bin, off, n1, r1, err1, n2, r2, err2)
			}
		}
	}
}

// TestConcurrent: lookups from several goroutines on one File (run with
// -race) give the answers of a serial run.
func TestConcurrent(t *testing.T) {
	b := gunzip(t, testdata+"/bin/clang-dwarf5.elf.gz")
	want := parseA2L(t, string(gunzip(t, testdata+"/bin/clang-dwarf5.addr2line.gz")))
	serial, err := openBytes(t, b)
	if err != nil {
		t.Fatal(err)
	}
	exp := map[uint64][]debuginfo.Frame{}
	for _, w := range want {
		exp[w.addr], _ = serial.Lookup(w.addr, debuginfo.PC)
	}
	f, err := openBytes(t, b)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range want {
				w := want[(i*7+g*13)%len(want)]
				got, _ := f.Lookup(w.addr, debuginfo.PC)
				if !equalFrames(got, exp[w.addr]) {
					errc <- fmt.Errorf("goroutine %d: %#x: %v, want %v", g, w.addr, got, exp[w.addr])
					return
				}
			}
			errc <- nil
		}()
	}
	for range 4 {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

// BenchmarkLookup: a cold lookup (open and decode the unit) and a warm one
// (the unit decoded), on gcc-dwarf5.
func BenchmarkLookup(b *testing.B) {
	data := gunzip(b, testdata+"/bin/gcc-dwarf5.elf.gz")
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f, err := openBytes(b, data)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.Lookup(0x40038c, debuginfo.ReturnAddress); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("warm", func(b *testing.B) {
		f, err := openBytes(b, data)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.Lookup(0x40038c, debuginfo.ReturnAddress); err != nil {
				b.Fatal(err)
			}
		}
	})
}
