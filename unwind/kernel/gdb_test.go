package kernel_test

import (
	"bufio"
	"fmt"
	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/unwind"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// gdbFrame is one frame of gdb's DWARF CFI backtrace (gdb-cfi-bt.txt).
type gdbFrame struct {
	PC      uint64
	Func    string // the outermost function at PC (the one kallsyms names)
	Inlined string // functions gdb shows inlined at PC, innermost first
}

// gdbStop is gdb's backtrace at one stop.
type gdbStop struct {
	Frames   []gdbFrame
	End      string // why gdb stopped
	Restored bool   // the CPU's registers were restored
	PlainBT  []string
}

// readGDBBT parses gdb-cfi-bt.txt, written by testdata/kernel/gdbbt.py.
func readGDBBT(path string) (map[string]*gdbStop, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]*gdbStop{}
	var cur *gdbStop
	plain := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		ln := sc.Text()
		switch {
		case strings.HasPrefix(ln, "@@STOP "):
			name := strings.Fields(ln)[1]
			cur = &gdbStop{}
			out[name] = cur
			plain = false
		case cur == nil:
			return nil, fmt.Errorf("%s:%d: line before @@STOP", path, n)
		case ln == "@@BT":
			plain = true
		case ln == "@@STRIPPED":
			plain = false
		case plain:
			cur.PlainBT = append(cur.PlainBT, ln)
		case strings.HasPrefix(ln, "#"):
			fs := strings.Fields(ln)
			if len(fs) < 3 || !strings.HasPrefix(fs[1], "pc=0x") {
				return nil, fmt.Errorf("%s:%d: bad frame %q", path, n, ln)
			}
			pc, err := strconv.ParseUint(strings.TrimPrefix(fs[1], "pc=0x"), 16, 64)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, n, err)
			}
			g := gdbFrame{PC: pc, Func: fs[2]}
			for _, x := range fs[3:] {
				if v, ok := strings.CutPrefix(x, "inlined="); ok {
					g.Inlined = v
				}
			}
			cur.Frames = append(cur.Frames, g)
		case strings.HasPrefix(ln, "end: "):
			cur.End = strings.TrimPrefix(ln, "end: ")
		case ln == "restored ok":
			cur.Restored = true
		}
	}
	return out, sc.Err()
}

// Rules explaining a difference between gdb's backtrace and the FP walk.
const (
	// gdbRuleX30 is a frame gdb finds through the prologue's CFI (in x30,
	// or where stp stored it) and the FP walk lacks: the stop is after the
	// SCS push, before x29 is set ([kernel.Prologue.PushedUnlinked]).
	gdbRuleX30 = "gdb only: the caller's return address of a function stopped in its prologue before its frame record was linked (CFI: in x30, or in the slot stp wrote before x29 was set)"
	// gdbRuleEntryAsm is the rest of the walk after gdb's last frame,
	// when that frame is entry assembly without CFI (gdb's prologue
	// analyser finds no caller: "caller identical"): call_on_irq_stack at
	// the IRQ stack boundary, el0t_64_sync at the end of the task stack.
	gdbRuleEntryAsm = "walk only: beyond gdb's last frame, entry assembly without CFI"
)

// entryAsm are the entry functions (arch/arm64/kernel/entry.S), assembly
// without DWARF CFI, where gdb's unwinding ends.
var entryAsm = map[string]bool{
	"call_on_irq_stack": true, "el0t_64_sync": true, "el0t_64_irq": true, "el1h_64_irq": true,
	"el1h_64_sync": true, "ret_from_fork": true, "cpu_switch_to": true,
}

// TestGDBBacktraceAgreesWithFPWalk holds the FP walk of the stopped CPU at
// each stop of the SCS kernels to a second, independent reference: gdb's
// backtrace of the same CPU at the same breakpoint, unwound with the DWARF
// CFI of the kernel's vmlinux (testdata/kernel/gdbbt.py; only the PAC
// strip between frames is shared with this project). Every frame must
// agree by pc and function name, except those a named rule explains.
func TestGDBBacktraceAgreesWithFPWalk(t *testing.T) {
	ms, err := filepath.Glob("../../testdata/kernel/*/gdb-cfi-bt.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scs-6.12", "scs-6.1", "scs-6.12-onstack", "scs-6.1-onstack"} {
		found := false
		for _, m := range ms {
			found = found || filepath.Base(filepath.Dir(m)) == want
		}
		if !found {
			t.Errorf("%s has no gdb-cfi-bt.txt", want)
		}
	}
	for _, m := range ms {
		dir := filepath.Dir(m)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			gs, err := readGDBBT(m)
			if err != nil {
				t.Fatal(err)
			}
			cp, err := kcapture.OpenCapture(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(gs) != len(cp.Expected.Stops) {
				t.Errorf("gdb-cfi-bt.txt has %d stops, expected.json %d", len(gs), len(cp.Expected.Stops))
			}
			agree, byRule := 0, map[string]int{}
			for i := range cp.Expected.Stops {
				s := &cp.Expected.Stops[i]
				g := gs[s.Name]
				if g == nil {
					t.Errorf("%s: no gdb backtrace", s.Name)
					continue
				}
				if !g.Restored {
					t.Errorf("%s: gdbbt.py did not restore the CPU's registers", s.Name)
				}
				// gdb's own bt stops at the first PAC-signed return
				// address: QEMU 7.2's gdbstub has no pauth feature.
				if len(g.PlainBT) == 0 || len(g.PlainBT) >= len(g.Frames) {
					t.Errorf("%s: plain bt of %d lines, stripped %d frames", s.Name, len(g.PlainBT), len(g.Frames))
				}
				k, err := cp.Kernel(s)
				if err != nil {
					t.Fatal(err)
				}
				w, err := k.CPUWalk(s.StoppedCPU)
				if err != nil {
					t.Fatal(err)
				}
				fs, _, err := w.Run()
				if err != nil {
					t.Fatalf("%s: %v", s.Name, err)
				}
				a, notes := alignGDB(k, g, fs)
				for _, n := range notes {
					if strings.HasPrefix(n, "UNEXPLAINED") {
						t.Errorf("%s: %s", s.Name, n)
					} else {
						byRule[n]++
					}
				}
				agree += a
				if a < len(g.Frames)-1 {
					t.Errorf("%s: only %d of gdb's %d frames agree", s.Name, a, len(g.Frames))
				}
				t.Logf("%s: cpu %d: gdb %d frames, walk %d, %d agree (pc and function); gdb ends at %s: %s", s.Name, s.StoppedCPU, len(g.Frames), len(fs), a, g.Frames[len(g.Frames)-1].Func, g.End)
			}
			for r, n := range byRule {
				t.Logf("%3d frames: %s", n, r)
			}
			if agree == 0 {
				t.Error("no frame agrees")
			}
		})
	}
}

// alignGDB lines gdb's frames up with the walk's, in order, and returns
// how many agree (same pc, gdb's function is the kallsyms function) and a
// note per difference: a rule's name, or UNEXPLAINED.
func alignGDB(k *kernel.Kernel, g *gdbStop, fs []unwind.Frame) (int, []string) {
	var notes []string
	agree, i, j := 0, 0, 0
	for i < len(g.Frames) && j < len(fs) {
		gf, wf := g.Frames[i], fs[j]
		name := kcapture.FuncOf(k.Format(wf.PC))
		switch {
		case gf.PC == wf.PC && gf.Func == name:
			agree++
			i, j = i+1, j+1
		case gf.PC == wf.PC:
			notes = append(notes, fmt.Sprintf("UNEXPLAINED: frame %d at %#x: gdb says %s, kallsyms %s", i, gf.PC, gf.Func, name))
			i, j = i+1, j+1
		case i == 1 && j == 1 && len(g.Frames) > 2 && g.Frames[2].PC == wf.PC:
			p, err := k.PrologueAt(fs[0].PC)
			if err == nil && p.PushedUnlinked() && fs[0].Origin == fp.OriginStopPC {
				notes = append(notes, gdbRuleX30)
			} else {
				notes = append(notes, fmt.Sprintf("UNEXPLAINED: gdb frame 1 %s#%x not in the walk (prologue %v, %v)", gf.Func, gf.PC, p, err))
			}
			i++
		default:
			notes = append(notes, fmt.Sprintf("UNEXPLAINED: gdb frame %d %s %#x, walk frame %d %s %#x", i, gf.Func, gf.PC, j, name, wf.PC))
			return agree, notes
		}
	}
	for ; i < len(g.Frames); i++ {
		notes = append(notes, fmt.Sprintf("UNEXPLAINED: gdb frame %d %s %#x after the walk's end", i, g.Frames[i].Func, g.Frames[i].PC))
	}
	if j < len(fs) {
		last := g.Frames[len(g.Frames)-1].Func
		if !entryAsm[last] || g.End != "caller identical" {
			notes = append(notes, fmt.Sprintf("UNEXPLAINED: gdb ends at %s (%s) with %d walk frames left", last, g.End, len(fs)-j))
		}
		for ; j < len(fs); j++ {
			notes = append(notes, gdbRuleEntryAsm+" ("+last+")")
		}
	}
	return agree, notes
}
