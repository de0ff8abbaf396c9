package prologue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/symtab/elfsym"
	"github.com/unwindkit/unwindkit/internal/symtab/elftest"
)

// The bombs' bound: a file of a few hundred KiB must be answered within
// bombAlloc bytes allocated. Memory is what the machine's load (or an
// emulator: these tests also run under qemu-aarch64) does not move; the
// time is logged, and a hang is go test's timeout.
const bombAlloc = 400 << 20

// measure runs f and returns its wall time and the bytes it allocated.
func measure(f func()) (time.Duration, uint64) {
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	start := time.Now()
	f()
	d := time.Since(start)
	runtime.ReadMemStats(&b)
	return d, b.TotalAlloc - a.TotalAlloc
}

func checkBounds(t *testing.T, what string, d time.Duration, alloc uint64) {
	t.Helper()
	t.Logf("%s: %v, %.1f MiB allocated", what, d.Round(time.Millisecond), float64(alloc)/(1<<20))
	if alloc > bombAlloc {
		t.Errorf("%s: %v and %d bytes allocated, want at most %d", what, d, alloc, bombAlloc)
	}
}

const (
	insnRet = 0xd65f03c0
	insnBL  = 0x94000000 // bl .
)

func repeatWord(n int, w uint32) []byte {
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// sharedNameExec returns an executable of n one-instruction functions
// whose names are all one string of nameLen bytes.
func sharedNameExec(n, nameLen int) []byte {
	var syms []byte
	for i := range n {
		syms = append(syms, elftest.Sym(1, elftest.Func, 1, 0x400000+uint64(4*i), 4)...)
	}
	strtab := append(append([]byte{0}, bytes.Repeat([]byte{'a'}, nameLen)...), 0)
	return elftest.Exec(0x400000, repeatWord(n, insnRet), syms, strtab)
}

// TestBombSharedName: a 300 KB .symtab of 12,500 functions sharing one
// 64 KiB name. debug/elf's Symbols copied the name for each (750 MB, and
// its byte loop over each): now every name is the table's substring cut
// to elfsym.MaxNameLen, and the Binary says so.
func TestBombSharedName(t *testing.T) {
	b := sharedNameExec(12500, 64<<10)
	var bin *Binary
	var err error
	d, alloc := measure(func() { bin, err = NewReader("shared.elf", bytes.NewReader(b), int64(len(b))) })
	checkBounds(t, "12,500 symbols sharing a 64 KiB name", d, alloc)
	if err != nil {
		t.Fatal(err)
	}
	if fs := bin.Funcs(); len(fs) != 12500 || len(fs[0].Name) != elfsym.MaxNameLen || fs[1].Size != 4 {
		t.Fatalf("%d functions, the first named with %d bytes", len(fs), len(fs[0].Name))
	}
	if n := bin.Notes(); len(n) != 1 || !strings.Contains(n[0], "12500 function names longer than 4096 bytes") {
		t.Errorf("notes %q", n)
	}
}

// TestBombCompressed: a .symtab SHF_COMPRESSED to 128 MiB of zeros from a
// file of about 130 KiB. debug/elf inflated all of it and made a Symbol
// of each 24 bytes: now ch_size is checked against elfsym.InflateBudget
// before inflating, and the file is refused, naming it, the section and
// the offset.
func TestBombCompressed(t *testing.T) {
	secs := elftest.Sections(0x400000, repeatWord(4, insnRet), nil, []byte("\x00f\x00"))
	secs[1].Compressed, secs[1].ChSize, secs[1].Data = true, 128<<20, elftest.ZlibZeros(128)
	b := elftest.Build(secs)
	var err error
	d, alloc := measure(func() { _, err = NewReader("zbomb.elf", bytes.NewReader(b), int64(len(b))) })
	checkBounds(t, "a .symtab compressed to 128 MiB", d, alloc)
	var fe *FileError
	if !errors.As(err, &fe) || !errors.Is(err, errs.ErrCorrupt) || fe.Off <= 0 ||
		!strings.Contains(err.Error(), "zbomb.elf") || !strings.Contains(err.Error(), ".symtab: SHF_COMPRESSED to 134217728 bytes (ch_size)") {
		t.Fatalf("%d-byte file: %v", len(b), err)
	}
}

// TestBombOverlapping: 20,000 functions 4 bytes apart, each with st_size
// 1 GiB. Each was scanned to its section's end (quadratic: 5,000 took
// 2.5 s, 20,000 about 40 s): now a span ends at the next symbol, the
// text is decoded once, and the Binary says the spans were cut.
func TestBombOverlapping(t *testing.T) {
	const n = 20000
	var syms []byte
	for i := range n {
		syms = append(syms, elftest.Sym(1, elftest.Func, 1, 0x400000+uint64(4*i), 1<<30)...)
	}
	b := elftest.Exec(0x400000, repeatWord(n, insnBL), syms, []byte("\x00f\x00"))
	var bin *Binary
	var err error
	d, alloc := measure(func() { bin, err = NewReader("overlap.elf", bytes.NewReader(b), int64(len(b))) })
	checkBounds(t, "20,000 overlapping 1 GiB functions", d, alloc)
	if err != nil {
		t.Fatal(err)
	}
	fs := bin.Funcs()
	if len(fs) != n {
		t.Fatalf("%d functions", len(fs))
	}
	for _, f := range fs {
		if f.Size != 4 || f.Calls != 1 {
			t.Fatalf("%+v: want 4 bytes and one call (cut at the next symbol)", f)
		}
	}
	if notes := bin.Notes(); len(notes) != 1 || !strings.Contains(notes[0], "19999 function symbols whose st_size runs over the next") {
		t.Errorf("notes %q", notes)
	}
}

// TestBombAliases: 8,000 aliases of one address, f0 to f7999, of sizes
// 32,000, 31,996, ... 4 bytes, over code whose every word is a bl. Each
// distinct span was scanned on its own (quadratic: 4,000 aliases took
// 1.7 s): now one pass gives each alias its own span, every call counted
// as before, and none is cut.
func TestBombAliases(t *testing.T) {
	const n = 8000
	var syms, strtab []byte
	strtab = append(strtab, 0)
	for i := range n {
		syms = append(syms, elftest.Sym(uint32(len(strtab)), elftest.Func, 1, 0x400000, 4*uint64(n-i))...)
		strtab = fmt.Appendf(strtab, "f%d\x00", i)
	}
	b := elftest.Exec(0x400000, repeatWord(n, insnBL), syms, strtab)
	var bin *Binary
	var err error
	d, alloc := measure(func() { bin, err = NewReader("aliases.elf", bytes.NewReader(b), int64(len(b))) })
	checkBounds(t, "8,000 aliases of one address", d, alloc)
	if err != nil {
		t.Fatal(err)
	}
	fs := bin.Funcs()
	if len(fs) != n {
		t.Fatalf("%d functions, want %d", len(fs), n)
	}
	for i, f := range fs {
		if f.Size != 4*uint64(n-i) || f.Calls != n-i || f.Name != fmt.Sprintf("f%d", i) {
			t.Fatalf("alias %d: %s, %d bytes, %d calls; want %d bytes and calls", i, f.Name, f.Size, f.Calls, n-i)
		}
	}
}

// TestScanSpans: scanning aliases of different sizes together gives what
// scanning each alone gives.
func TestScanSpans(t *testing.T) {
	for _, name := range []string{"clang-pacret.elf", "gcc-pfe.elf", "shapes.elf"} {
		b, err := Open(binDir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range b.Funcs() {
			sec := b.section(f.Addr)
			code := sec.data[f.Addr-sec.addr:][:f.Size]
			sizes := []uint64{f.Size, 0, 4, f.Size / 2, f.Size - f.Size%4, 3, f.Size}
			got := scanSpans(f.Addr, code, sizes, decoder{})
			for i, sz := range sizes {
				want := ScanCode("", f.Addr, code[:sz])
				if got[i] != want {
					t.Fatalf("%s %s size %d: together %+v, alone %+v", name, f.Name, sz, got[i], want)
				}
			}
		}
	}
}
