package debuginfo_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/debuginfo"
)

// fuzzPCs are looked up in every fuzz input: code addresses of the seed
// binaries (executables at 0x400000 and 0x210000, the library near 0).
var fuzzPCs = []uint64{0x400120, 0x400200, 0x400300, 0x210204, 0x210300, 0x2101c8, 0x6a0, 0x800}

// FuzzLookup opens arbitrary bytes as an ELF file (seeds: the test
// binaries cut to their debug sections, 2 to 8 KB) and looks pcs up: no
// panic (Lookup's recover is off), errors that wrap ErrCorrupt (or say
// there is nothing) and allocation bounded by the input's size; then
// asks its Types for a few structure offsets: no panic, errors naming
// the file.
func FuzzLookup(f *testing.F) {
	for _, bin := range []string{"gcc-dwarf4", "gcc-dwarf5", "clang-dwarf4", "clang-dwarf5", "gcc-dwarf5-so", "gcc-dwarf4-gz", "gcc-lto"} {
		f.Add(debugOnly(f, gunzip(f, testdata+"/bin/"+bin+".elf.gz")), uint64(0))
	}
	old := debuginfo.SetRecoverPanics(false)
	f.Cleanup(func() { debuginfo.SetRecoverPanics(old) })
	f.Fuzz(func(t *testing.T, data []byte, pc uint64) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		df, err := debuginfo.NewFile("fuzz", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			checkErr(t, err)
			return
		}
		defer df.Close()
		for _, p := range append(fuzzPCs, pc) {
			for _, kind := range []debuginfo.Kind{debuginfo.PC, debuginfo.ReturnAddress} {
				frames, err := df.Lookup(p, kind)
				if err != nil {
					checkErr(t, err)
					continue
				}
				if len(frames) == 0 {
					t.Fatalf("%#x: no frames and no error", p)
				}
				for i, fr := range frames {
					if fr.Inlined != (i < len(frames)-1) && !(len(frames) == 1 && !fr.Inlined) {
						if i == len(frames)-1 && fr.Inlined {
							continue // the chain's top is inlined: an inlined DIE at unit level
						}
						t.Fatalf("%#x: frame %d of %d has Inlined %v", p, i, len(frames), fr.Inlined)
					}
				}
			}
		}
		// Types: answers or errors naming the file, never a panic.
		ty := df.Types()
		for _, path := range []string{"task_struct.thread.cpu_context", "s.a.b", "s.x"} {
			if _, err := ty.Offset(path); err != nil && !strings.HasPrefix(err.Error(), "fuzz: ") {
				t.Fatalf("Types.Offset(%q): error does not name the file: %v", path, err)
			}
		}
		if _, err := ty.Size("pt_regs"); err != nil && !strings.HasPrefix(err.Error(), "fuzz: ") {
			t.Fatalf("Types.Size: error does not name the file: %v", err)
		}
		runtime.ReadMemStats(&after)
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(len(data))*200+64<<20; got > limit {
			t.Fatalf("%d bytes allocated for a %d-byte input (limit %d)", got, len(data), limit)
		}
	})
}

func checkErr(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, debuginfo.ErrCorrupt) || errors.Is(err, debuginfo.ErrNotFound) || errors.Is(err, debuginfo.ErrNoDWARF) {
		if !strings.HasPrefix(err.Error(), "fuzz: ") {
			t.Fatalf("error does not name the file: %v", err)
		}
		return
	}
	if errors.Is(err, debuginfo.ErrNotSupported) {
		return
	}
	t.Fatalf("error wraps no sentinel: %v", err)
}

// sectionAt returns the file offset and size of the named section.
func sectionAt(t *testing.T, data []byte, name string) (off, size uint64) {
	t.Helper()
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	s := ef.Section(name)
	if s == nil {
		t.Fatalf("no %s", name)
	}
	return s.Offset, s.Size
}

// TestCorruptUnitNamesWhere: a unit length past .debug_info's end is an
// error naming the file, the section and the offset.
func TestCorruptUnitNamesWhere(t *testing.T) {
	data := gunzip(t, testdata+"/bin/gcc-dwarf5.elf.gz")
	off, _ := sectionAt(t, data, ".debug_info")
	binary.LittleEndian.PutUint32(data[off:], 0x7fffffff)
	f, err := debuginfo.NewFile("gcc-dwarf5.elf", bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Lookup(0x400120, debuginfo.PC)
	if !errors.Is(err, debuginfo.ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
	for _, want := range []string{"gcc-dwarf5.elf: ", ".debug_info", "offset 0x0", "length 0x7fffffff"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestLineDirectoryBomb: a DWARF 5 line header claiming 2^28 directories
// of no bytes each is refused before debug/dwarf allocates for them
// (4 GB of strings, and 2^28 iterations).
func TestLineDirectoryBomb(t *testing.T) {
	data := gunzip(t, testdata+"/bin/clang-dwarf5.elf.gz")
	off, _ := sectionAt(t, data, ".debug_line")
	p := data[off:]
	if binary.LittleEndian.Uint16(p[4:]) != 5 || p[17] != 13 {
		t.Fatalf("unexpected line header % x", p[:40])
	}
	// unit_length(4) version(2) address_size(1) seg_sel(1)
	// header_length(4) min_inst max_ops default_is_stmt line_base
	// line_range (5) opcode_base(1) opcode lengths(12): the directory
	// format count is at 30. No formats, then the count: 2^28.
	copy(p[30:], []byte{0, 0x80, 0x80, 0x80, 0x80, 0x01})
	f, err := debuginfo.NewFile("clang-dwarf5.elf", bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = f.Lookup(0x2101c8, debuginfo.PC)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, debuginfo.ErrCorrupt) || !strings.Contains(err.Error(), ".debug_line program at offset 0x0") ||
		!strings.Contains(err.Error(), "268435456 directory entries") {
		t.Fatalf("got %v, want the directory count refused", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("allocated %d bytes", got)
	}
}

// TestCompressedBomb: a compressed .debug_info claiming 1 TB decompressed
// is refused before the buffer is allocated.
func TestCompressedBomb(t *testing.T) {
	data := gunzip(t, testdata+"/bin/gcc-dwarf4-gz.elf.gz")
	off, _ := sectionAt(t, data, ".debug_info")
	// Elf64_Chdr: ch_type(4) ch_reserved(4) ch_size(8) ch_addralign(8).
	if binary.LittleEndian.Uint32(data[off:]) != uint32(elf.COMPRESS_ZLIB) {
		t.Fatalf("no zlib Chdr at .debug_info")
	}
	binary.LittleEndian.PutUint64(data[off+8:], 1<<40)
	f, err := debuginfo.NewFile("gz.elf", bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = f.Lookup(0x400120, debuginfo.PC)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, debuginfo.ErrCorrupt) || !strings.Contains(err.Error(), "compressed section .debug_info") {
		t.Fatalf("got %v, want the size refused", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("allocated %d bytes", got)
	}
}

func openBytes(t testing.TB, b []byte) (*debuginfo.File, error) {
	return debuginfo.NewFile("test", bytes.NewReader(b), int64(len(b)))
}

func equalFrames(a, b []debuginfo.Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRefusals: an ET_REL object is ErrNotSupported, a file without
// .debug_info ErrNoDWARF, a pc outside every unit ErrNotFound, an
// invalid Kind an error.
func TestRefusals(t *testing.T) {
	orig := gunzip(t, testdata+"/bin/gcc-dwarf5.elf.gz")
	rel := bytes.Clone(orig)
	binary.LittleEndian.PutUint16(rel[16:], uint16(elf.ET_REL))
	if _, err := openBytes(t, rel); !errors.Is(err, debuginfo.ErrNotSupported) {
		t.Errorf("ET_REL: got %v, want ErrNotSupported", err)
	}
	nodwarf := bytes.Clone(orig)
	i := bytes.Index(nodwarf, []byte(".debug_info\x00"))
	if i < 0 {
		t.Fatal("no .debug_info name")
	}
	nodwarf[i+1] = 'x'
	if _, err := openBytes(t, nodwarf); !errors.Is(err, debuginfo.ErrNoDWARF) {
		t.Errorf("no .debug_info: got %v, want ErrNoDWARF", err)
	}
	f, err := openBytes(t, orig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Lookup(0x1000, debuginfo.PC); !errors.Is(err, debuginfo.ErrNotFound) || !strings.Contains(err.Error(), "0x1000") {
		t.Errorf("pc outside: got %v, want ErrNotFound naming the pc", err)
	}
	if _, err := f.Lookup(0x400388, 0); err == nil {
		t.Errorf("Kind 0: no error")
	}
}
