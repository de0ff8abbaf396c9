package debuginfo_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/internal/needs"
	"github.com/unwindkit/unwindkit/unwind/debuginfo"
)

// kernelCapture is the shipped capture whose kernel's addr2line answers
// are shipped beside it (testdata/kernel/vmlinux-debug.sh). The kernel's
// DWARF (clang 14, DWARF 5, sections zlib-compressed, .text NOBITS) is
// 19 MB, too large to ship: SCS_VMLINUX_DEBUG names it
// ($KCAP/scs/scs-6.12-percpu/vmlinux.debug), or a vmlinux.debug beside
// the capture, if one is ever shipped.
const kernelCapture = "../../testdata/kernel/scs-6.12-percpu"

// readA2LFile parses addr2line -a -f -i output with '#' comment lines.
func readA2LFile(t *testing.T, path string) []a2l {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return parseA2L(t, strings.Join(lines, "\n"))
}

// TestKernelCaptureAddr2line looks up every frame the kernel printed in
// the scs-6.12-percpu capture (each Call trace and each shadow call stack
// copy, internal/kcapture's PrintedAddrs: return addresses) in that
// kernel's own DWARF (vmlinux.debug) and compares the function, file:line
// and inline chain with GNU addr2line -f -i at the call (return address -
// 4): with its answers recorded in addr2line.txt, and, where it is
// installed, with addr2line run now on the same file. The lookup at the
// return address (Kind ReturnAddress) must equal the one at the call.
//
// Two differences are allowed, by rule, as in TestVmlinux and
// TestAddr2lineGolden: symtab, a pc no DIE covers (the entry assembly),
// which addr2line names from .symtab and we leave ""; and rnglistx,
// binutils 2.40 leaving out inlined levels whose ranges are
// DW_FORM_rnglistx (clang's DWARF 5), where llvm-symbolizer's answer,
// shipped beside addr2line's (llvm-symbolizer.txt), must be ours.
func TestKernelCaptureAddr2line(t *testing.T) {
	cp, err := kcapture.OpenCapture(kernelCapture)
	if err != nil {
		t.Fatal(err)
	}
	ras, err := cp.PrintedAddrs()
	if err != nil {
		t.Fatal(err)
	}
	debug := filepath.Join(kernelCapture, "vmlinux.debug")
	if _, err := os.Stat(debug); err != nil {
		if debug = os.Getenv("SCS_VMLINUX_DEBUG"); debug == "" {
			t.Skip("set SCS_VMLINUX_DEBUG to the debug sections of scs-6.12-percpu's vmlinux (testdata/kernel/vmlinux-debug.sh writes them to $KCAP/scs/scs-6.12-percpu/vmlinux.debug; 19 MB, not shipped)")
		}
	}
	want := readA2LFile(t, filepath.Join(kernelCapture, "addr2line.txt"))
	if len(want) != len(ras) || len(ras) < 50 {
		t.Fatalf("addr2line.txt answers %d addresses, the capture printed %d frames (want at least 50)", len(want), len(ras))
	}
	for i, w := range want {
		if w.addr != ras[i]-4 {
			t.Fatalf("addr2line.txt entry %d at %#x, the printed frame's call is at %#x", i, w.addr, ras[i]-4)
		}
	}
	f, err := debuginfo.Open(debug)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	second := readA2LFile(t, filepath.Join(kernelCapture, "llvm-symbolizer.txt"))
	if len(second) != len(want) {
		t.Fatalf("llvm-symbolizer.txt answers %d addresses, addr2line.txt %d", len(second), len(want))
	}
	check := func(src string, want []a2l) {
		t.Helper()
		same, symtab, rnglistx, inlined := 0, 0, 0, 0
		for i, w := range want {
			frames, err := f.Lookup(ras[i], debuginfo.ReturnAddress)
			if err != nil && !errors.Is(err, debuginfo.ErrNotFound) {
				t.Errorf("%#x: %v", ras[i], err)
				continue
			}
			at, err2 := f.Lookup(w.addr, debuginfo.PC)
			if !slices.Equal(asAddr2line(at), asAddr2line(frames)) || (err == nil) != (err2 == nil) {
				t.Errorf("%#x: at the return address %q (%v), at the call %q (%v)", ras[i], asAddr2line(frames), err, asAddr2line(at), err2)
			}
			ours, exp := normalize(asAddr2line(frames)), normalize(w.lines)
			switch {
			case slices.Equal(ours, exp):
				same++
			case len(ours) == len(exp) && ours[0] == "??" && exp[0] != "??" && slices.Equal(ours[1:], exp[1:]):
				symtab++
			case second[i].addr == w.addr && slices.Equal(ours, symbolizerLines(second[i].lines)) && droppedLevels(ours, exp):
				rnglistx++
			default:
				t.Errorf("%s: %#x (return address %#x):\n got %q\nwant %q", src, w.addr, ras[i], ours, exp)
			}
			inlined += max(0, len(frames)-1)
		}
		if inlined == 0 {
			t.Errorf("%s: no inlined frame among %d addresses", src, len(want))
		}
		t.Logf("%s: %d printed frames: %d equal addr2line's, %d by rule symtab, %d by rule rnglistx (llvm-symbolizer agrees with us); %d inlined frames", src, len(want), same, symtab, rnglistx, inlined)
	}
	check("addr2line.txt", want)

	tool := needs.Tool(t, "aarch64-linux-gnu-addr2line", "binutils-aarch64-linux-gnu")
	var addrs []uint64
	for _, w := range want {
		addrs = append(addrs, w.addr)
	}
	live := runAddr2line(t, tool, debug, addrs)
	if len(live) != len(want) {
		t.Fatalf("addr2line now answers %d of %d addresses", len(live), len(want))
	}
	if v, err := exec.Command(tool, "--version").Output(); err == nil {
		t.Logf("live: %s", strings.SplitN(string(v), "\n", 2)[0])
	}
	check("addr2line now", live)
}
