package core_test

import (
	"bytes"
	"errors"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/internal/symtab/elftest"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
)

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

// loadWithExe loads the synthetic core with exe as its executable, within
// the bombs' bound (400 MB allocated).
func loadWithExe(t *testing.T, what string, exe []byte) *core.Core {
	t.Helper()
	b := synth().Bytes()
	var co *core.Core
	var err error
	d, alloc := measure(func() {
		co, err = core.Load("synth.core", bytes.NewReader(b), int64(len(b)), core.ObjectFile{Path: "hostile.elf", Data: exe})
	})
	t.Logf("%s: %v, %.1f MiB allocated", what, d.Round(time.Millisecond), float64(alloc)/(1<<20))
	// Memory is the bound that does not depend on the machine's load;
	// the time is logged (a hang is go test's timeout).
	if alloc > 400<<20 {
		t.Errorf("%s: %v and %d bytes allocated, want at most 400 MiB", what, d, alloc)
	}
	if err != nil {
		t.Fatal(err)
	}
	return co
}

func warned(co *core.Core, subs ...string) bool {
	for _, w := range co.Warnings {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(w, s)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestBombExecutableSharedName: an executable whose 12,500 functions
// share one 64 KiB name (a .symtab of 300 KB): debug/elf's Symbols copied
// the name for each (14 s, 626 MiB). The names are now cut to 4 KiB, with
// a warning naming the executable.
func TestBombExecutableSharedName(t *testing.T) {
	const n = 12500
	var syms []byte
	for i := range n {
		syms = append(syms, elftest.Sym(1, elftest.Func, 1, text+uint64(4*i), 4)...)
	}
	strtab := append(append([]byte{0}, bytes.Repeat([]byte{'a'}, 64<<10)...), 0)
	co := loadWithExe(t, "executable with 12,500 symbols sharing a 64 KiB name", elftest.Exec(text, make([]byte, 4*n), syms, strtab))
	if len(co.Objects) == 0 || co.Objects[0].Symbols != n {
		t.Fatalf("objects %+v", co.Objects)
	}
	if !warned(co, "hostile.elf", "12500 names in .symtab longer than 4096 bytes") {
		t.Errorf("warnings %q", co.Warnings)
	}
	if got := co.Symbolizer().Name(text + 4); len(got) != 4096+len("+0x0") {
		t.Errorf("name of %d bytes", len(got))
	}
}

// TestBombExecutableCompressed: an executable of 130 KB whose .symtab is
// SHF_COMPRESSED to 128 MiB of zeros: debug/elf inflated it whole. It is
// now refused before inflating, with a warning naming the executable, the
// section, ch_size and the offset; its .dynsym would be used instead (it
// has none: no symbols).
func TestBombExecutableCompressed(t *testing.T) {
	secs := elftest.Sections(text, make([]byte, 16), nil, []byte("\x00f\x00"))
	secs[1].Compressed, secs[1].ChSize, secs[1].Data = true, 128<<20, elftest.ZlibZeros(128)
	co := loadWithExe(t, "executable with a .symtab compressed to 128 MiB", elftest.Build(secs))
	if len(co.Objects) == 0 || co.Objects[0].Path != "hostile.elf" || co.Objects[0].Symbols != 0 {
		t.Fatalf("objects %+v", co.Objects)
	}
	if !warned(co, "executable hostile.elf", ".symtab: SHF_COMPRESSED to 134217728 bytes (ch_size)", "at offset 0x") {
		t.Errorf("warnings %q", co.Warnings)
	}
}

// TestWalkErrorsNameTheCore: a frame-record walk that meets corruption
// names the core file, the thread, the technique, and the segment and
// file offset of the bad address (the bytes there are the address's),
// and keeps errors.Is(ErrCorrupt) and the CorruptError's rule; the SCS
// copy's refusal names the file and keeps ErrNotSupported.
func TestWalkErrorsNameTheCore(t *testing.T) {
	bd := synth()
	stack := bd.Loads[1].Data
	le.PutUint64(stack[0x900:], stackBase+0xa03) // a misaligned frame pointer
	b := bd.Bytes()
	co, err := loadBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	th := &co.Threads[0]
	_, err = co.Frames(th, unwind.MethodFP)
	var ce *unwind.CorruptError
	if !errors.Is(err, unwind.ErrCorrupt) || !errors.As(err, &ce) || ce.Rule != "misaligned fp" || ce.Addr != stackBase+0xa03 {
		t.Fatalf("FP walk: %v (%+v)", err, ce)
	}
	m := regexp.MustCompile(`^core: synth\.core: thread 42: frame-record walk \(segment \d+, file offset (0x[0-9a-f]+)\): `).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("FP walk error %q does not say where", err)
	}
	off, _ := strconv.ParseUint(m[1], 0, 64)
	want := make([]byte, 8)
	if err := co.ReadAt(want, ce.Addr); err != nil {
		t.Fatal(err)
	}
	if off+8 > uint64(len(b)) || !bytes.Equal(b[off:off+8], want) {
		t.Errorf("file offset %#x does not hold the bytes at %#x", off, ce.Addr)
	}

	th.HasSCS, th.SCSNote = false, "test"
	_, err = co.Frames(th, unwind.MethodSCS)
	if !errors.Is(err, unwind.ErrNotSupported) || !strings.HasPrefix(err.Error(), "core: synth.core: thread 42: ") {
		t.Errorf("SCS copy: %v", err)
	}
}
