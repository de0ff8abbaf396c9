package core_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
)

const dir = "../../testdata/cores"

func gunzip(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// capture is one committed core: NAME-CPU-SCENARIO.core.gz with its
// executable bin/NAME.elf.gz.
type capture struct {
	path, exe, scenario, cpu string
}

func captures(t *testing.T) []capture {
	paths, err := filepath.Glob(filepath.Join(dir, "cores", "*.core.gz"))
	if err != nil || len(paths) < 26 {
		t.Fatalf("want at least 26 committed cores, found %d (%v)", len(paths), err)
	}
	var out []capture
	for _, p := range paths {
		parts := strings.Split(strings.TrimSuffix(filepath.Base(p), ".core.gz"), "-")
		n := len(parts)
		out = append(out, capture{path: p, exe: filepath.Join(dir, "bin", strings.Join(parts[:n-2], "-")+".elf.gz"),
			cpu: parts[n-2], scenario: parts[n-1]})
	}
	return out
}

func load(t *testing.T, c capture) *core.Core {
	t.Helper()
	b := gunzip(t, c.path)
	co, err := core.Load(c.path, bytes.NewReader(b), int64(len(b)), core.ObjectFile{Path: c.exe, Data: gunzip(t, c.exe)})
	if err != nil {
		t.Fatal(err)
	}
	return co
}

// ours are the functions of src/crash.c and src/main.c.
var ours = map[string]bool{"crash_leaf": true, "leaf_mid": true, "leaf_root": true, "rec": true, "rec_root": true,
	"handler_inner": true, "on_usr1": true, "sig_mid": true, "sig_root": true, "cmp_ints": true, "sort_root": true, "main": true}

// The chains known from the source (our functions only, innermost first)
// and what the SCS copy must see of them: the return addresses that
// instrumented callees with a prologue pushed (not the crashing pc, not a
// leaf's caller, not the caller of libc's raise or qsort).
var chains = map[string]struct{ known, scs []string }{
	"leaf": {
		known: []string{"crash_leaf", "leaf_mid", "leaf_root", "main"},
		scs:   []string{"leaf_root", "main"},
	},
	"recurse": {
		known: []string{"rec", "rec", "rec", "rec", "rec", "rec", "rec_root", "main"},
		scs:   []string{"rec", "rec", "rec", "rec", "rec", "rec_root", "main"},
	},
	"signal": {
		known: []string{"handler_inner", "on_usr1", "sig_mid", "sig_root", "main"},
		scs:   []string{"sig_root", "main"},
	},
	"qsort": {
		known: []string{"cmp_ints", "sort_root", "main"},
		scs:   []string{"main"},
	},
}

// leafCrash reports whether the crashing function runs without a frame of
// its own, so that its caller's return address is only in x30: the leaf,
// the signal handler's callee and the qsort callback are leaves; GCC also
// shrink-wraps rec, whose n <= 1 path crashes before any prologue.
func leafCrash(c capture) bool {
	return c.scenario != "recurse" || strings.HasPrefix(filepath.Base(c.exe), "gcc")
}

// expect returns what the FP walk and the SCS copy must see of c's chain.
func expect(c capture) (fp, scs []string) {
	ch := chains[c.scenario]
	fp, scs = slices.Clone(ch.known), slices.Clone(ch.scs)
	if leafCrash(c) && c.scenario != "qsort" { // qsort: x30 holds libc's msort
		fp = slices.Delete(fp, 1, 2)
		if c.scenario == "recurse" {
			scs = slices.Delete(scs, 0, 1)
		}
	}
	return fp, scs
}

func funcs(sym *unwind.Symbolizer, fs []unwind.Frame) []string {
	var out []string
	for _, f := range fs {
		if n := sym.Func(f.PC); ours[n] {
			out = append(out, n)
		}
	}
	return out
}

// TestCommittedCores unwinds every committed core with both techniques and
// checks them against the chain known from the source; every frame only
// one technique has must carry an explanation.
func TestCommittedCores(t *testing.T) {
	for _, c := range captures(t) {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			co := load(t, c)
			ch, ok := chains[c.scenario]
			if !ok {
				t.Fatalf("unknown scenario %q", c.scenario)
			}
			wantFP, wantSCS := expect(c)
			if len(co.Threads) != 1 || co.Threads[0].Signal != 11 {
				t.Fatalf("threads %+v: want one thread killed by SIGSEGV", co.Threads)
			}
			th := &co.Threads[0]
			if !th.HasSCS || !th.SCSGuarded || !th.SCSBaseGuessed {
				t.Fatalf("SCS not found between guard pages: %+v", th)
			}
			sym := co.Symbolizer()
			fpF, err := co.Frames(th, unwind.MethodFP)
			if err != nil {
				t.Fatalf("FP walk: %v", err)
			}
			scsF, err := co.Frames(th, unwind.MethodSCS)
			if err != nil {
				t.Fatalf("SCS copy: %v", err)
			}
			if got := funcs(sym, fpF); !slices.Equal(got, wantFP) {
				t.Errorf("FP walk sees %v, want %v", got, wantFP)
			}
			if got := funcs(sym, scsF); !slices.Equal(got, wantSCS) {
				t.Errorf("SCS copy sees %v, want %v", got, wantSCS)
			}
			// The known chain is what the FP walk saw plus the leaf's
			// caller, which x30 holds (for qsort: libc's msort).
			if leafCrash(c) && c.scenario != "qsort" {
				if got := sym.Func(co.Layout.Strip(th.Regs.X[30])); got != ch.known[1] {
					t.Errorf("x30 is in %s, want the leaf's caller %s", got, ch.known[1])
				}
			}
			// Every SCS entry is also a frame-record lr (same raw value,
			// PAC included): the SCS is a subsequence of the FP walk.
			j := 0
			for _, f := range fpF {
				if j < len(scsF) && f.Raw == scsF[j].Raw {
					j++
				}
			}
			if j != len(scsF) {
				t.Errorf("SCS entry %d (%#x) is not in the FP walk in order", j, scsF[j].Raw)
			}
			signed := 0
			for _, f := range append(scsF, fpF...) {
				if f.Raw != f.PC {
					signed++
				}
			}
			pac := strings.Contains(c.exe, "pacret") && c.cpu == "pauth"
			if pac != (signed > 0) {
				t.Errorf("%d PAC-signed return addresses; want some exactly for pac-ret with pauth on", signed)
			}
			for i, r := range co.Compare(th).Rows {
				if r.InSCS != r.InFP && r.Note == "" {
					t.Errorf("row %d differs without explanation", i)
				}
			}
		})
	}
}

// gdbFrames reads a .gdb.txt file: gdb's frame pcs, innermost first.
func gdbFrames(t *testing.T, r io.Reader) []uint64 {
	var out []uint64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.HasPrefix(f[0], "#") {
			continue
		}
		n, err := strconv.Atoi(f[0][1:])
		if err != nil {
			t.Fatalf("bad gdb line %q", sc.Text())
		}
		if n < len(out) {
			continue // gdb prints frame 0 twice
		}
		pc, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err != nil || n != len(out) {
			t.Fatalf("bad gdb line %q", sc.Text())
		}
		out = append(out, pc)
	}
	return out
}

// TestCommittedCoresAgainstGDB holds both unwinders against gdb's
// backtrace of the same core (kept next to it by build.sh, for the
// PAC-off runs): the FP walk reports gdb's frames except the leaf's
// caller, which only x30 holds; the SCS copy reports a subsequence of
// them.
func TestCommittedCoresAgainstGDB(t *testing.T) {
	n := 0
	for _, c := range captures(t) {
		if c.cpu != "nopauth" {
			continue
		}
		n++
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			g, err := os.Open(strings.TrimSuffix(c.path, ".core.gz") + ".gdb.txt")
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			gdb := gdbFrames(t, g)
			checkAgainstGDB(t, load(t, c), c, gdb)
		})
	}
	if n < 16 {
		t.Fatalf("%d PAC-off cores, want 16", n)
	}
}

func checkAgainstGDB(t *testing.T, co *core.Core, c capture, gdb []uint64) {
	scenario := c.scenario
	t.Helper()
	th := &co.Threads[0]
	if len(gdb) < 2 {
		t.Fatalf("gdb gave %d frames", len(gdb))
	}
	fpF, _ := co.Frames(th, unwind.MethodFP)
	scsF, _ := co.Frames(th, unwind.MethodSCS)
	want := slices.Clone(gdb)
	x30, only := co.X30Only(th)
	// X30Only finds the leaf's caller except for GCC's shrink-wrapped
	// rec, whose x30 equals the first record's lr.
	if want := leafCrash(c) && !(c.scenario == "recurse"); only != want || only && x30 != gdb[1] {
		t.Errorf("X30Only %#x, %v; want %v with gdb's frame 1 %#x", x30, only, want, gdb[1])
	}
	if leafCrash(c) {
		if gdb[1] != co.Layout.Strip(th.Regs.X[30]) {
			t.Fatalf("gdb's frame 1 %#x is not x30 %#x", gdb[1], th.Regs.X[30])
		}
		want = slices.Delete(want, 1, 2) // only in x30
	}
	var got []uint64
	for _, f := range fpF[:min(len(want), len(fpF))] {
		got = append(got, f.PC)
	}
	if !slices.Equal(got, want) {
		t.Errorf("FP walk %#x, gdb (without the x30 frame) %#x", got, want)
	}
	j := 0
	for _, pc := range gdb {
		if j < len(scsF) && scsF[j].PC == pc {
			j++
		}
	}
	// Entries beyond gdb's last frame (it stops at main) are not checked.
	if j < len(scsF) {
		last := gdb[len(gdb)-1]
		if !slices.ContainsFunc(scsF[:j], func(f unwind.Frame) bool { return f.PC == last }) && scenario != "signal" {
			t.Errorf("SCS copy %v is not a subsequence of gdb's %#x", scsF, gdb)
		}
	}
	if j == 0 && scenario != "signal" {
		t.Errorf("no SCS entry matched gdb's frames")
	}
}
