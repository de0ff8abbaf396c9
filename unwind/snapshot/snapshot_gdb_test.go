package snapshot

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/prologue"
)

// gdbCapture is the part of a testdata/arm64/gdb capture the loader
// ignores: gdb-multiarch's backtrace at the capture point ("gen -run").
type gdbCapture struct {
	GDB struct {
		Version   string `json:"version"`
		Backtrace []struct {
			PC   string `json:"pc"`
			Func string `json:"func"`
			Type string `json:"type"`
			LR   string `json:"lr"`
		} `json:"backtrace"`
	} `json:"gdb"`
	Source struct {
		Binary string `json:"binary"`
	} `json:"source"`
}

// gdbFrame is one physical frame of gdb's backtrace.
type gdbFrame struct {
	pc, lr   uint64
	sigtramp bool // gdb's <signal handler called>
}

// The rules that explain every difference between gdb's backtrace and the
// two unwinders at the same point; each is named in the test's report.
const (
	ruleInline      = "gdb inline frame: not a physical frame, same pc as its caller"
	ruleSignalLR    = "signal frame: gdb shows the interrupted pc, the FP walk the interrupted x30 saved in the frame record of the signal frame"
	ruleInnermost   = "SCS: the innermost pc is no return address"
	ruleNotPushed   = "SCS: the function returned from is not instrumented (libc, ld.so, main's runtime, the signal trampoline): it pushes nothing"
	ruleInterrupted = "SCS: the pc a signal interrupted is no return address"
)

// TestSnapshotGDB checks both unwinders on the captures of a dynamically
// linked PIE program (testdata/arm64/gdb: a qsort comparator called back
// through glibc, a signal handler on the normal stack) against
// gdb-multiarch's backtrace at the same breakpoint: equal pc for pc,
// except where a named rule explains the difference. Which functions push
// on the shadow call stack is read from the binary by the prologue
// scanner, not assumed. build.sh recaptures these files with a live gdb
// in CI and this test then runs on the fresh files.
func TestSnapshotGDB(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/arm64/gdb/*.json")
	if len(files) < 2 {
		t.Fatalf("found %d gdb captures, want at least 2", len(files))
	}
	sawLibc, sawSignal := false, false
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var gc gdbCapture
			if err := json.Unmarshal(raw, &gc); err != nil {
				t.Fatal(err)
			}
			s := loadSnap(t, path)
			sym := s.Symbolizer()
			bin, err := prologue.OpenBinary("../../" + gc.Source.Binary)
			if err != nil {
				t.Fatal(err)
			}
			// The load bias of the PIE: main in the snapshot minus main
			// in the file.
			binMain, ok := bin.Func("main")
			if !ok {
				t.Fatal("no main in the binary")
			}
			var bias uint64
			for _, sy := range sym.Symbols() {
				if sy.Name == "main" {
					bias = sy.Addr - binMain.Addr
				}
			}
			rules := map[string]int{}
			var g []gdbFrame
			for _, f := range gc.GDB.Backtrace {
				pc, err1 := strconv.ParseUint(f.PC, 0, 64)
				lr, err2 := strconv.ParseUint(f.LR, 0, 64)
				if err1 != nil || err2 != nil {
					t.Fatalf("gdb frame %+v", f)
				}
				if f.Type == "inline" {
					rules[ruleInline]++
					continue
				}
				if f.Type != "normal" && f.Type != "sigtramp" {
					t.Fatalf("gdb frame type %q", f.Type)
				}
				g = append(g, gdbFrame{pc: pc, lr: lr, sigtramp: f.Type == "sigtramp"})
			}
			name := func(pc uint64) string {
				if n := sym.Func(pc); n != "" {
					return n
				}
				return "?"
			}

			// FP walk: gdb's pcs, except after a signal trampoline.
			_, fpF := names(t, s, unwind.MethodFP)
			if len(fpF) != len(g) {
				t.Errorf("FP walk has %d frames, gdb %d", len(fpF), len(g))
			}
			for k := range min(len(fpF), len(g)) {
				want := g[k].pc
				if k > 0 && g[k-1].sigtramp {
					want = g[k].lr
					rules[ruleSignalLR]++
					sawSignal = true
				}
				if fpF[k].PC != want {
					t.Errorf("FP frame %d: %#x (%s), want %#x (%s) from gdb", k, fpF[k].PC, name(fpF[k].PC), want, name(want))
				}
			}
			// The expected chain (from gen's -expect) names the same frames
			// as gdb, "?" where no symbol covers the pc.
			if len(s.Expect) != len(g) {
				t.Errorf("expect has %d frames, gdb %d", len(s.Expect), len(g))
			}
			for k := range min(len(s.Expect), len(g)) {
				if got := name(g[k].pc); got != s.Expect[k] {
					t.Errorf("gdb frame %d is %s, expect says %s", k, got, s.Expect[k])
				}
			}
			// A call back through a library: program, library, program.
			inBin := func(k int) bool { _, ok := bin.FuncAt(g[k].pc - bias); return ok }
			for k := 1; k+1 < len(g); k++ {
				if inBin(k-1) && !inBin(k) && !g[k].sigtramp && slices.ContainsFunc(g[k+1:], func(f gdbFrame) bool {
					_, ok := bin.FuncAt(f.pc - bias)
					return ok
				}) {
					sawLibc = true
				}
			}

			// SCS copy: frame k+1's return address is on the shadow stack
			// exactly when frame k's function pushed x30, as the scanner
			// sees it in the binary.
			var want []uint64
			for k := 0; k+1 < len(g); k++ {
				if k == 0 {
					rules[ruleInnermost]++
				}
				f, ok := bin.FuncAt(g[k].pc - bias)
				switch {
				case g[k].sigtramp:
					rules[ruleInterrupted]++
				case !ok || !f.SCSPush:
					rules[ruleNotPushed]++
				default:
					want = append(want, g[k+1].pc)
				}
			}
			_, scsF := names(t, s, unwind.MethodSCS)
			var got []uint64
			for _, f := range scsF {
				got = append(got, f.PC)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("SCS copy %x, want %x (gdb's frames returned to by instrumented functions)", got, want)
			}
			var report []string
			for r, n := range rules {
				report = append(report, fmt.Sprintf("%d x %s", n, r))
			}
			t.Logf("gdb %s: %d physical frames, FP walk %d, SCS copy %d; differences explained:\n\t%s",
				gc.GDB.Version, len(g), len(fpF), len(scsF), strings.Join(report, "\n\t"))
		})
	}
	if !sawSignal {
		t.Error("no capture has a signal frame")
	}
	if !sawLibc {
		t.Error("no capture calls back through a shared library")
	}
}
