package core_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/elfcore"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
)

var le = binary.LittleEndian

const (
	stackBase = 0x7ff000
	stackSize = 0x1000
	scsBase   = 0x900000
	text      = 0x400000
)

func u64s(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = le.AppendUint64(b, v)
	}
	return b
}

func prstatus(pid int, sig int, x18, x29, x30, sp, pc uint64) []byte {
	d := make([]byte, 392)
	le.PutUint16(d[12:], uint16(sig))
	le.PutUint32(d[32:], uint32(pid))
	r := d[112:]
	le.PutUint64(r[18*8:], x18)
	le.PutUint64(r[29*8:], x29)
	le.PutUint64(r[30*8:], x30)
	le.PutUint64(r[31*8:], sp)
	le.PutUint64(r[32*8:], pc)
	return d
}

// pac39 signs an address for a 39-bit VA with TBI: bits 54:39.
func pac39(a, pac uint64) uint64 { return a | pac<<39&(1<<55-1<<39) }

// synth builds a Linux-style core: one thread whose frame records chain
// f3 <- f2 <- f1 with PAC-signed return addresses (39-bit VA), a shadow
// call stack between guard pages, NT_AUXV, NT_FILE, NT_ARM_PAC_MASK and
// NT_ARM_TAGGED_ADDR_CTRL.
func synth() *elfcore.Builder {
	stack := make([]byte, stackSize)
	// Frame records at stackBase+0x800 -> +0x900 -> +0xa00 -> {0, 0}.
	put := func(addr, v uint64) { le.PutUint64(stack[addr-stackBase:], v) }
	put(stackBase+0x800, stackBase+0x900)
	put(stackBase+0x808, pac39(text+0x104, 0x1234))
	put(stackBase+0x900, stackBase+0xa00)
	put(stackBase+0x908, pac39(text+0x204, 0x55))
	put(stackBase+0xa00, 0)
	put(stackBase+0xa08, text+0x304)
	scs := make([]byte, 0x1000)
	copy(scs, u64s(text+0x304, pac39(text+0x204, 0x55), pac39(text+0x104, 0x1234)))
	ntfile := u64s(2, 0x1000, text, text+0x1000, 0, scsBase-0x1000, scsBase, 3)
	ntfile = append(ntfile, "/bin/prog\x00/dev/zero\x00"...)
	return &elfcore.Builder{
		Notes: []elfcore.BNote{
			{Name: "CORE", Type: 1, Desc: prstatus(42, 11, scsBase+24, stackBase+0x800, pac39(text+0x104, 0x1234), stackBase+0x7f0, text+0x10)},
			{Name: "CORE", Type: 6, Desc: u64s(16, 1<<30, 26, 0, 9, text, 0, 0)},
			{Name: "CORE", Type: 0x46494c45, Desc: ntfile},
			{Name: "LINUX", Type: 0x406, Desc: u64s(0x007f_ff80_0000_0000, 0x007f_ff80_0000_0000)},
			{Name: "LINUX", Type: 0x409, Desc: u64s(1)},
		},
		Loads: []elfcore.BLoad{
			{VAddr: text, Flags: 5, MemSz: 0x1000},
			{VAddr: stackBase, Flags: 6, Data: stack},
			{VAddr: scsBase - 0x1000, MemSz: 0x1000},
			{VAddr: scsBase, Flags: 6, Data: scs},
			{VAddr: scsBase + 0x1000, MemSz: 0x1000},
		},
	}
}

func loadBytes(b []byte) (*core.Core, error) {
	return core.Load("synth.core", bytes.NewReader(b), int64(len(b)))
}

func TestSynthLinuxNotes(t *testing.T) {
	co, err := loadBytes(synth().Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !co.HasPACMask || co.Layout.Lower().VABits != 39 || !co.Layout.Lower().TBI {
		t.Errorf("layout %+v from %q: want 39-bit VA with TBI from NT_ARM_PAC_MASK", co.Layout.Lower(), co.LayoutFrom)
	}
	if !co.HasTaggedAddrCtrl || co.TaggedAddrCtrl != 1 {
		t.Errorf("tagged addr ctrl %v %#x", co.HasTaggedAddrCtrl, co.TaggedAddrCtrl)
	}
	if hw, _ := co.HWCap(); hw&core.HWCapPACA == 0 {
		t.Errorf("hwcap %#x: PACA missing", hw)
	}
	want := []core.Mapping{{Start: text, End: text + 0x1000, Path: "/bin/prog"}, {Start: scsBase - 0x1000, End: scsBase, FileOff: 0x3000, Path: "/dev/zero"}}
	if len(co.Files) != 2 || co.Files[0] != want[0] || co.Files[1] != want[1] {
		t.Errorf("NT_FILE %+v, want %+v", co.Files, want)
	}
	th := &co.Threads[0]
	if th.PID != 42 || th.Signal != 11 || !th.HasSCS || th.SCSBase != scsBase || !th.SCSGuarded {
		t.Fatalf("thread %+v", th)
	}
	pcs := func(m unwind.Method) []uint64 {
		fs, err := co.Frames(th, m)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		var out []uint64
		for _, f := range fs {
			out = append(out, f.PC)
		}
		return out
	}
	if got, want := pcs(unwind.MethodFP), []uint64{text + 0x10, text + 0x104, text + 0x204, text + 0x304}; !equal(got, want) {
		t.Errorf("FP %#x, want %#x", got, want)
	}
	if got, want := pcs(unwind.MethodSCS), []uint64{text + 0x104, text + 0x204, text + 0x304}; !equal(got, want) {
		t.Errorf("SCS %#x, want %#x", got, want)
	}
	// Without NT_ARM_PAC_MASK the default (48-bit) layout leaves bits
	// 47:39 of these 39-bit PACs in place: the mask matters.
	b := synth()
	b.Notes = append(b.Notes[:3], b.Notes[4])
	co2, err := loadBytes(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := co2.Frames(&co2.Threads[0], unwind.MethodSCS)
	if len(fs) != 3 || fs[2].PC == text+0x104 {
		t.Errorf("default layout stripped a 39-bit PAC: %+v", fs)
	}
}

func equal(a, b []uint64) bool {
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

// TestSynthBadInput: every malformed field is an error naming the file,
// the part and the offset, never a panic.
func TestSynthBadInput(t *testing.T) {
	good := synth().Bytes()
	type tc struct {
		name string
		mod  func() []byte
		want string
	}
	patch := func(off int, v uint64) func() []byte {
		return func() []byte {
			b := bytes.Clone(good)
			le.PutUint64(b[off:], v)
			return b
		}
	}
	ph := func(i, field int) int { return 64 + 56*i + field }
	note := func(n elfcore.BNote) func() []byte {
		return func() []byte {
			bd := synth()
			bd.Notes = append(bd.Notes, n)
			return bd.Bytes()
		}
	}
	cases := []tc{
		{"empty", func() []byte { return nil }, "shorter than the ELF header"},
		{"truncated header", func() []byte { return good[:40] }, "header at offset 0x0"},
		{"truncated segments", func() []byte { return good[:len(good)-100] }, "outside the file"},
		{"phdrs outside", patch(32, 1<<40), "program headers"},
		{"segment outside", patch(ph(2, 8), 1<<50), "segment 2"},
		{"filesz huge", patch(ph(2, 32), 1<<62), "segment 2"},
		{"filesz > memsz", patch(ph(4, 40), 8), "p_filesz"},
		{"overlap", patch(ph(4, 16), stackBase+0x800), "overlaps"},
		{"wraps", patch(ph(1, 16), ^uint64(0)-10), "wraps"},
		{"note size", note(elfcore.BNote{Name: "CORE", Type: 1, Desc: make([]byte, 100)}), "NT_PRSTATUS of 100 bytes"},
		{"pac mask size", note(elfcore.BNote{Name: "LINUX", Type: 0x406, Desc: make([]byte, 8)}), "NT_ARM_PAC_MASK of 8 bytes"},
		{"tagged size", note(elfcore.BNote{Name: "LINUX", Type: 0x409, Desc: make([]byte, 4)}), "NT_ARM_TAGGED_ADDR_CTRL"},
		{"gcs short", note(elfcore.BNote{Name: "LINUX", Type: 0x410, Desc: u64s(1, 1)}), "NT_ARM_GCS of 16 bytes for thread 42, want 24"},
		{"gcs long", note(elfcore.BNote{Name: "LINUX", Type: 0x410, Desc: u64s(1, 1, gcsTop-32, 0)}), "NT_ARM_GCS of 32 bytes"},
		{"gcs empty", note(elfcore.BNote{Name: "LINUX", Type: 0x410}), "NT_ARM_GCS of 0 bytes"},
		{"gcs twice", func() []byte {
			bd := synthGCS(core.GCSEnable, gcsTop-32)
			bd.Notes = append(bd.Notes, bd.Notes[len(bd.Notes)-1])
			return bd.Bytes()
		}, "second NT_ARM_GCS for thread 42"},
		{"gcs before prstatus", func() []byte {
			bd := synthGCS(core.GCSEnable, gcsTop-32)
			n := len(bd.Notes) - 1
			bd.Notes = append([]elfcore.BNote{bd.Notes[n]}, bd.Notes[:n]...)
			return bd.Bytes()
		}, "NT_ARM_GCS before any NT_PRSTATUS"},
		{"gcspr misaligned", func() []byte { return synthGCS(core.GCSEnable, gcsTop-31).Bytes() }, "gcspr_el0 0xa00fe1 of thread 42 is not 8-byte aligned"},
		{"auxv size", func() []byte {
			bd := synth()
			bd.Notes[1].Desc = bd.Notes[1].Desc[:20]
			return bd.Bytes()
		}, "NT_AUXV of 20 bytes"},
		{"ntfile count", func() []byte {
			bd := synth()
			le.PutUint64(bd.Notes[2].Desc, 1<<40)
			return bd.Bytes()
		}, "NT_FILE count"},
		{"ntfile names", func() []byte {
			bd := synth()
			bd.Notes[2].Desc = bd.Notes[2].Desc[:len(bd.Notes[2].Desc)-1]
			return bd.Bytes()
		}, "not NUL-terminated"},
		{"note namesz", func() []byte {
			b := bytes.Clone(good)
			le.PutUint32(b[64+56*6:], 1<<30) // first note's namesz
			return b
		}, "name size"},
		{"no threads", func() []byte {
			bd := synth()
			bd.Notes = bd.Notes[1:]
			return bd.Bytes()
		}, "no NT_PRSTATUS"},
		{"not core", patch(16, 2), "ET_CORE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadBytes(c.mod())
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "synth.core") {
				t.Errorf("error %q: want it to name the file and say %q", err, c.want)
			}
			if !errors.Is(err, unwind.ErrCorrupt) {
				t.Errorf("error %v does not wrap ErrCorrupt", err)
			}
		})
	}
}

// TestSynthRegistersOutside: registers that point outside every segment
// give errors from the unwinders, not panics, and no shadow call stack.
func TestSynthRegistersOutside(t *testing.T) {
	bd := synth()
	bd.Notes[0].Desc = prstatus(1, 11, 0x5000_0000, 0x6000_0000, 0, 0x7000_0000, 0x8000_0000)
	co, err := loadBytes(bd.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	th := &co.Threads[0]
	if th.HasSCS || !strings.Contains(th.SCSNote, "no writable segment") {
		t.Errorf("SCS %v, note %q", th.HasSCS, th.SCSNote)
	}
	if _, err := co.Frames(th, unwind.MethodSCS); !errors.Is(err, unwind.ErrNotSupported) {
		t.Errorf("SCS copy: %v, want ErrNotSupported", err)
	}
	fs, err := co.Frames(th, unwind.MethodFP)
	if err == nil || len(fs) != 1 {
		t.Errorf("FP walk from an fp outside every segment: %d frames, err %v; want the pc and an error", len(fs), err)
	}
}

// TestTrimRoundTrip: a trimmed core is still a core with the same notes,
// the kept bytes, and segments without bytes for the rest.
func TestTrimRoundTrip(t *testing.T) {
	good := synth().Bytes()
	var out bytes.Buffer
	if err := core.Trim(&out, "synth.core", bytes.NewReader(good), int64(len(good)), [][2]uint64{{stackBase + 0x800, stackBase + 0x1000}, {scsBase, scsBase + 0x100}}); err != nil {
		t.Fatal(err)
	}
	co, err := loadBytes(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(co.Files) != 2 || !co.HasPACMask {
		t.Errorf("notes lost: files %d, pac mask %v", len(co.Files), co.HasPACMask)
	}
	var b [8]byte
	if err := co.ReadAt(b[:], stackBase+0x808); err != nil || le.Uint64(b[:]) != pac39(text+0x104, 0x1234) {
		t.Errorf("kept word: %#x, %v", b, err)
	}
	if err := co.ReadAt(b[:], stackBase+0x100); !errors.Is(err, core.ErrNotHeld) {
		t.Errorf("dropped word: %v, want ErrNotHeld", err)
	}
	fs, err := co.Frames(&co.Threads[0], unwind.MethodFP)
	if err != nil || len(fs) != 4 {
		t.Errorf("FP walk on the trimmed core: %d frames, %v", len(fs), err)
	}
	segs := co.Segments()
	if len(segs) != 7 {
		t.Errorf("%d segments after trimming, want 7 (text, stack in 2, guard, scs in 2, guard)", len(segs))
	}
}

func FuzzLoad(f *testing.F) {
	f.Add(synth().Bytes())
	bd := synth()
	bd.Notes = bd.Notes[:2]
	f.Add(bd.Bytes())
	f.Add(synthGCS(core.GCSEnable, gcsTop-32).Bytes())
	f.Add(synthGCS(core.GCSEnable, 0x5000_0000).Bytes()) // GCSPR_EL0 in no segment
	f.Fuzz(func(t *testing.T, b []byte) {
		co, err := loadBytes(b)
		if err != nil {
			return
		}
		for i := range co.Threads {
			co.Compare(&co.Threads[i])
			co.Frames(&co.Threads[i], unwind.MethodGCS)
		}
		var out bytes.Buffer
		if err := core.Trim(&out, "fuzz", bytes.NewReader(b), int64(len(b)), [][2]uint64{{0, 1 << 62}}); err == nil {
			if _, err := loadBytes(out.Bytes()); err != nil {
				t.Fatalf("trimmed copy of a valid core does not load: %v", err)
			}
		}
	})
}

// TestNTFileLibraries: a Linux-style core of a static executable with a
// shared object mapped (NT_FILE, no link map in memory): the object's
// symbols are found at the mapping minus its first PT_LOAD's page, and
// the executable's own NT_FILE mapping is not taken for a library.
func TestNTFileLibraries(t *testing.T) {
	exe := gunzip(t, dir+"/bin/gcc-nopac.elf.gz")
	lib := gunzip(t, dir+"/bin/gcc-pie.elf.gz")
	lf, err := elf.NewFile(bytes.NewReader(lib))
	if err != nil {
		t.Fatal(err)
	}
	ss, _ := lf.Symbols()
	var leaf uint64
	for _, s := range ss {
		if s.Name == "crash_leaf" {
			leaf = s.Value
		}
	}
	const libBase = 0x7f00_0000_0000
	bd := synth()
	ntfile := u64s(2, 0x1000, text, text+0x1000, 0, libBase, libBase+0x1000, 0)
	ntfile = append(ntfile, "/usr/bin/gcc-nopac.elf\x00/usr/lib/libpie.so\x00"...)
	bd.Notes[2].Desc = ntfile
	bd.Notes[0].Desc = prstatus(7, 11, scsBase+24, stackBase+0x800, 0, stackBase+0x7f0, libBase+leaf+4)
	b := bd.Bytes()
	co, err := core.Load("synth.core", bytes.NewReader(b), int64(len(b)),
		core.ObjectFile{Path: "gcc-nopac.elf", Data: exe}, core.ObjectFile{Path: "libpie.so", Data: lib})
	if err != nil {
		t.Fatal(err)
	}
	if len(co.Objects) != 2 || co.Objects[1].Path != "/usr/lib/libpie.so" || co.Objects[1].Bias != libBase || co.Objects[1].Symbols == 0 {
		t.Fatalf("objects %+v", co.Objects)
	}
	if got := co.Symbolizer().Name(co.Threads[0].Regs.PC); got != "crash_leaf+0x4" {
		t.Errorf("pc symbolized as %s", got)
	}
}

// TestSynthThreads: a second thread (its own NT_PRSTATUS, as Linux writes
// one per thread) without a shadow call stack is unwound by the FP walk
// and reported without one.
func TestSynthThreads(t *testing.T) {
	bd := synth()
	th2 := prstatus(43, 0, 0, stackBase+0x900, 0, stackBase+0x8f0, text+0x20)
	bd.Notes = append(bd.Notes[:1], append([]elfcore.BNote{{Name: "CORE", Type: 1, Desc: th2}}, bd.Notes[1:]...)...)
	b := bd.Bytes()
	co, err := loadBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(co.Threads) != 2 || co.Threads[1].PID != 43 || co.Threads[1].HasSCS || co.Threads[1].SCSNote == "" {
		t.Fatalf("threads %+v", co.Threads)
	}
	fs, err := co.Frames(&co.Threads[1], unwind.MethodAuto)
	if err != nil || len(fs) != 3 || fs[1].PC != text+0x204 {
		t.Errorf("thread 2: %+v, %v", fs, err)
	}
	cmp := co.Compare(&co.Threads[1])
	if !errors.Is(cmp.SCSErr, unwind.ErrNotSupported) || cmp.FPErr != nil || len(cmp.Rows) != 3 {
		t.Errorf("compare: %v / %v, %d rows", cmp.SCSErr, cmp.FPErr, len(cmp.Rows))
	}
}

// The synthetic GCS: one page at gcsBase, its top marker in the last slot.
const (
	gcsBase = 0xa00000
	gcsTop  = gcsBase + 0x1000
)

// synthGCS is synth with a Guarded Control Stack: an NT_ARM_GCS note
// (features_enabled enabled, features_locked GCSEnable, gcspr_el0 gcspr)
// after the thread's other notes and a writable page at gcsBase holding,
// from gcsTop-32 up, the three return addresses of the frame chain and
// the top marker.
func synthGCS(enabled, gcspr uint64) *elfcore.Builder {
	bd := synth()
	g := make([]byte, 0x1000)
	copy(g[0x1000-32:], u64s(text+0x104, text+0x204, text+0x304, 0))
	bd.Notes = append(bd.Notes, elfcore.BNote{Name: "LINUX", Type: 0x410, Desc: u64s(enabled, core.GCSEnable, gcspr)})
	bd.Loads = append(bd.Loads, elfcore.BLoad{VAddr: gcsBase, Flags: 6, Data: g})
	return bd
}

// TestSynthGCS: the GCS copy of a synthetic core reads NT_ARM_GCS's
// GCSPR_EL0 up to the marker; a GCSPR_EL0 outside every segment, or one
// whose entries run off the mapping without the marker, is an error
// naming the core (not ErrNotSupported), never a panic.
func TestSynthGCS(t *testing.T) {
	co, err := loadBytes(synthGCS(core.GCSEnable|core.GCSWrite, gcsTop-32).Bytes())
	if err != nil {
		t.Fatal(err)
	}
	th := &co.Threads[0]
	want := core.GCSRegs{FeaturesEnabled: core.GCSEnable | core.GCSWrite, FeaturesLocked: core.GCSEnable, GCSPR: gcsTop - 32}
	if !th.HasGCS || th.GCS != want || !th.GCS.Enabled() {
		t.Fatalf("GCS %v %+v, want %+v", th.HasGCS, th.GCS, want)
	}
	fs, err := co.Frames(th, unwind.MethodGCS)
	var pcs []uint64
	for _, f := range fs {
		pcs = append(pcs, f.PC)
	}
	if err != nil || !equal(pcs, []uint64{text + 0x104, text + 0x204, text + 0x304}) || fs[0].Addr != gcsTop-32 {
		t.Errorf("GCS copy %x (%+v), %v", pcs, fs, err)
	}

	co, err = loadBytes(synthGCS(core.GCSEnable, 0x5000_0000).Bytes())
	if err != nil {
		t.Fatal(err)
	}
	_, err = co.Frames(&co.Threads[0], unwind.MethodGCS)
	if err == nil || errors.Is(err, unwind.ErrNotSupported) || !errors.Is(err, core.ErrNotHeld) ||
		!strings.Contains(err.Error(), "synth.core") || !strings.Contains(err.Error(), "gcspr_el0 0x50000000") {
		t.Errorf("GCSPR_EL0 outside every segment: %v; want ErrNotHeld naming the core and the pointer", err)
	}

	bd := synthGCS(core.GCSEnable, gcsTop-32)
	copy(bd.Loads[len(bd.Loads)-1].Data[0x1000-8:], u64s(text+0x404)) // the marker overwritten
	co, err = loadBytes(bd.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	fs, err = co.Frames(&co.Threads[0], unwind.MethodGCS)
	if len(fs) != 4 || !errors.Is(err, unwind.ErrCorrupt) || !strings.Contains(err.Error(), "synth.core") || !strings.Contains(err.Error(), "GCS copy") {
		t.Errorf("GCS without its top marker: %d frames, %v; want 4 and a corruption error naming the core", len(fs), err)
	}
}

// TestSynthGCSReadsLivePart: a GCS of 4 MiB (what Linux maps for an
// 8 MiB stack limit) whose live part is its last 32 bytes: Load does not
// read it, and the copy reads the live part only, not the mapping.
func TestSynthGCSReadsLivePart(t *testing.T) {
	const size = 4 << 20
	bd := synth()
	g := make([]byte, size)
	copy(g[size-32:], u64s(text+0x104, text+0x204, text+0x304, 0))
	top := uint64(0x4000_0000 + size)
	bd.Notes = append(bd.Notes, elfcore.BNote{Name: "LINUX", Type: 0x410, Desc: u64s(core.GCSEnable, 0, top-32)})
	bd.Loads = append(bd.Loads, elfcore.BLoad{VAddr: 0x4000_0000, Flags: 6, Data: g})
	b := bd.Bytes()
	var m0, m1, m2 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	co, err := loadBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	fs, err := co.Frames(&co.Threads[0], unwind.MethodGCS)
	runtime.ReadMemStats(&m2)
	if err != nil || len(fs) != 3 {
		t.Fatalf("GCS copy: %d frames, %v", len(fs), err)
	}
	if load, cp := m1.TotalAlloc-m0.TotalAlloc, m2.TotalAlloc-m1.TotalAlloc; load > size/4 || cp > size/4 {
		t.Errorf("Load allocated %d bytes, the copy %d: want each well under the 4 MiB GCS", load, cp)
	}
}
