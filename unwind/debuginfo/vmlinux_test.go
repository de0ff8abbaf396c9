package debuginfo_test

import (
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/unwind/debuginfo"
)

// TestVmlinux compares with addr2line on a kernel's -dbg vmlinux, too large
// to ship: DEBUGINFO_VMLINUX names it (Debian's
// linux-image-6.1.0-57-cloud-arm64-dbg, the kernel of
// testdata/kernel/deb-6.1). The addresses: the return addresses of every
// frame of deb-6.1's traces (looked up at the call), and 1,000 bl
// instructions spread over .text.
//
// Differences from addr2line, each counted by its rule:
//   - symtab: no DIE covers the pc (assembly: el1h_64_irq, ret_from_fork),
//     where addr2line takes the name from .symtab and we give "".
//   - file1: binutils 2.40 names the unit's primary file for file 1 of a
//     DWARF 5 line table (see otherFile); llvm-symbolizer agrees with us.
func TestVmlinux(t *testing.T) {
	vmlinux := os.Getenv("DEBUGINFO_VMLINUX")
	if vmlinux == "" {
		t.Skip("set DEBUGINFO_VMLINUX to the -dbg vmlinux of testdata/kernel/deb-6.1 (linux-image-6.1.0-57-cloud-arm64-dbg)")
	}
	tool := needs(t, "aarch64-linux-gnu-addr2line", "binutils-aarch64-linux-gnu")
	sym := needs(t, "llvm-symbolizer", "llvm")
	ras := kernelFrames(t, vmlinux)
	calls := kernelCalls(t, vmlinux, 1000)
	var addrs []uint64
	for _, ra := range ras {
		addrs = append(addrs, ra-4)
	}
	addrs = append(addrs, calls...)

	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	t0 := time.Now()
	f, err := debuginfo.Open(vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if os.Getenv("DEBUGINFO_CHECK_RANGES") != "" {
		debuginfo.CheckRanges(f) // the timings then include debug/dwarf's Ranges
	}
	got := map[uint64][]debuginfo.Frame{}
	for i, a := range addrs {
		kind, pc := debuginfo.PC, a
		if i < len(ras) {
			kind, pc = debuginfo.ReturnAddress, ras[i]
		}
		frames, err := f.Lookup(pc, kind)
		if err != nil {
			t.Errorf("%#x: %v", pc, err)
		}
		got[a] = frames
		if i == len(ras)-1 {
			t.Logf("%d frame return addresses: %v (open included)", len(ras), time.Since(t0))
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%d lookups: %v, %d MB allocated", len(addrs), time.Since(t0), (after.TotalAlloc-before.TotalAlloc)>>20)

	want := runAddr2line(t, tool, vmlinux, addrs)
	second := map[uint64][]string{}
	for _, s := range runAddr2line(t, sym, vmlinux, addrs, "--output-style=GNU") {
		second[s.addr] = s.lines
	}
	var same, symtab, file1, bad, inlined int
	for _, w := range want {
		ours := normalize(asAddr2line(got[w.addr]))
		exp := normalize(w.lines)
		inlined += max(0, len(got[w.addr])-1)
		switch {
		case slices.Equal(ours, exp):
			same++
		case len(ours) == len(exp) && ours[0] == "??" && exp[0] != "??" && slices.Equal(ours[1:], exp[1:]):
			symtab++
		case otherFile(ours, exp, symbolizerLines(second[w.addr])):
			file1++
		default:
			if bad++; bad <= 10 {
				t.Errorf("%#x:\n got %q\nwant %q\nllvm-symbolizer %q", w.addr, ours, exp, second[w.addr])
			}
		}
	}
	if len(want) != len(addrs) || bad > 0 {
		t.Errorf("%d of %d addresses differ (addr2line answered %d)", bad, len(addrs), len(want))
	}
	t.Logf("%d addresses: %d equal addr2line's, %d by rule symtab, %d by rule file1; %d inlined frames",
		len(addrs), same, symtab, file1, inlined)
}

// kernelFrames returns the return addresses of deb-6.1's trace frames
// ("func+0xoff/0xsize"), from vmlinux's .symtab; the size nearest the
// kernel's (which counts to the next kallsyms symbol) picks among
// same-named functions.
func kernelFrames(t *testing.T, vmlinux string) []uint64 {
	b, err := os.ReadFile("../../testdata/kernel/deb-6.1/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Traces []struct{ Frames []string }
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]elf.Symbol{}
	for _, s := range syms {
		if typ := elf.ST_TYPE(s.Info); typ == elf.STT_FUNC || typ == elf.STT_NOTYPE {
			byName[s.Name] = append(byName[s.Name], s)
		}
	}
	var out []uint64
	for _, tr := range doc.Traces {
		for _, fr := range tr.Frames {
			name, rest, ok := strings.Cut(strings.Fields(fr)[0], "+")
			if !ok {
				continue
			}
			offs, sizes, _ := strings.Cut(rest, "/")
			off, err1 := strconv.ParseUint(offs, 0, 64)
			size, err2 := strconv.ParseUint(sizes, 0, 64)
			cands := byName[name]
			if err1 != nil || err2 != nil || len(cands) == 0 {
				t.Fatalf("frame %q: no symbol", fr)
			}
			best := slices.MinFunc(cands, func(a, b elf.Symbol) int {
				return int(absDiff(a.Size, size)) - int(absDiff(b.Size, size))
			})
			out = append(out, best.Value+off)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) < 50 {
		t.Fatalf("only %d frames", len(out))
	}
	return out
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// kernelCalls returns n bl instructions evenly spread over .text.
func kernelCalls(t *testing.T, vmlinux string, n int) []uint64 {
	ef, err := elf.Open(vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	s := ef.Section(".text")
	b, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	var all []uint64
	for i := 0; i+4 <= len(b); i += 4 {
		if binary.LittleEndian.Uint32(b[i:])&0xfc000000 == 0x94000000 {
			all = append(all, s.Addr+uint64(i))
		}
	}
	var out []uint64
	for i := 0; i < n && len(all) > 0; i++ {
		out = append(out, all[i*len(all)/n])
	}
	return out
}
