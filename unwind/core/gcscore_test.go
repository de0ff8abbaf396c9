package core_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/gcscases"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
	"github.com/unwindkit/unwindkit/unwind/gcs"
)

// gcsCores are the cores Linux 7.2 wrote of the GCS test program
// (testdata/arm64/gcs/kcore.sh: Debian sid's cloud kernel under
// qemu-system-aarch64 -cpu max, GCC 16, glibc 2.43, GCS enabled by
// glibc's tunable), with the program's symbol table.
const gcsCores = "../../testdata/arm64/gcs/cores"

// gcsChains are the chains the scenarios build (testdata/arm64/gcs/src,
// as capture.sh's expectations): the crashing pc first. The core build
// faults at the capture point instead of stopping there for gdb.
var gcsChains = func() map[string][]string {
	start := []string{"__libc_start_call_main", "__libc_start_main", "_start"}
	rec := []string{"capture_here"}
	for range 101 {
		rec = append(rec, "rec")
	}
	m := map[string][]string{
		"chain":   {"capture_here", "chain_d", "chain_c", "chain_b", "run_chain", "main"},
		"leaf":    {"leaf_spin", "leaf_mid", "run_leaf", "main"},
		"noframe": {"capture_here", "noframe_call", "asm_mid", "run_noframe", "main"},
		"recurse": append(rec, "run_recurse", "main"),
		"signal":  {"capture_here", "handler_mid", "on_usr1", "?", "sig_raise", "sig_mid", "run_signal", "main"},
		"longjmp": {"capture_here", "lj_after", "lj_top", "run_longjmp", "main"},
	}
	for k, v := range m {
		m[k] = append(v, start...)
	}
	m["thread"] = []string{"capture_here", "chain_d", "chain_c", "chain_b", "run_chain", "thread_main", "start_thread", "thread_start"}
	return m
}()

func loadGCSCore(t testing.TB, name string) *core.Core {
	t.Helper()
	b := gunzip(t, gcsCores+"/"+name+".core.gz")
	sym := gunzip(t, gcsCores+"/gcs-core.sym.gz")
	co, err := core.Load(name+".core", bytes.NewReader(b), int64(len(b)), core.ObjectFile{Path: "gcs", Data: sym})
	if err != nil {
		t.Fatal(err)
	}
	return co
}

func names(co *core.Core, fs []unwind.Frame) []string {
	var out []string
	for _, f := range fs {
		n := co.Symbolizer().Func(f.PC)
		if n == "" {
			n = "?"
		}
		out = append(out, n)
	}
	return out
}

// TestGCSCoresThreeTechniques unwinds the crashing thread of each real
// core with the GCS copy (NT_ARM_GCS's GCSPR_EL0 over the GCS mapping),
// the SCS copy and the FP walk side by side, each against the chain from
// the source minus what its rules say it cannot see (as unwind/gcs's
// TestCapturesThreeTechniques does for the qemu-user snapshots):
//
//   - GCS: the crashing pc and the pc the signal interrupted (no return
//     addresses) and _start (running when glibc enabled GCS); it sees
//     leaf_mid (only in x30), asm_mid (no frame record), glibc's frames
//     and the kernel's sigreturn trampoline in the vDSO ("?"), below the
//     signal cap token Linux pushed.
//   - SCS: the pc, the interrupted pc, everything above main (glibc
//     and gcsrt.c are not instrumented), leaf_mid and asm_mid; after the
//     longjmp two dead slots.
//   - FP: leaf_mid and asm_mid.
func TestGCSCoresThreeTechniques(t *testing.T) {
	for _, sc := range []string{"chain", "leaf", "noframe", "recurse", "signal", "longjmp", "thread"} {
		t.Run(sc, func(t *testing.T) {
			co := loadGCSCore(t, sc)
			th := &co.Threads[0]
			if th.Signal != 11 || !th.HasGCS || !th.GCS.Enabled() || !th.HasSCS {
				t.Fatalf("thread %d: signal %d, GCS %v %+v, SCS %v", th.PID, th.Signal, th.HasGCS, th.GCS, th.HasSCS)
			}
			if th.GCS.FeaturesLocked&core.GCSEnable == 0 {
				t.Errorf("features_locked %#x: glibc locks the enable bit", th.GCS.FeaturesLocked)
			}
			e := gcsChains[sc]
			if got := co.Symbolizer().Func(th.Regs.PC); got != e[0] {
				t.Fatalf("crashed in %q, want %q", got, e[0])
			}
			wantGCS, wantSCS, wantFP := gcscases.Want(sc, e)
			g, err := co.Frames(th, unwind.MethodGCS)
			if err != nil {
				t.Fatalf("GCS copy: %v", err)
			}
			for _, f := range g {
				if f.Origin != fp.OriginGCS || f.Addr < th.GCS.GCSPR {
					t.Errorf("GCS frame %+v: origin or slot below GCSPR_EL0 %#x", f, th.GCS.GCSPR)
				}
			}
			if got := names(co, g); !slices.Equal(got, wantGCS) {
				t.Errorf("GCS\n got %v\nwant %v", got, wantGCS)
			}
			if sc == "signal" {
				// Above the trampoline's slot: the signal cap token
				// Linux pushed at delivery (GCS_SIGNAL_CAP of its slot).
				i := slices.Index(names(co, g), "?")
				var b [8]byte
				if err := co.ReadAt(b[:], g[i].Addr+8); err != nil || binary.LittleEndian.Uint64(b[:]) != gcs.SignalCap(g[i].Addr+8) {
					t.Errorf("slot above the trampoline %#x: %x, %v; want the signal cap", g[i].Addr, b, err)
				}
			}
			s, err := co.Frames(th, unwind.MethodSCS)
			if err != nil {
				t.Fatalf("SCS copy: %v", err)
			}
			if got := names(co, s); !slices.Equal(got, wantSCS) {
				t.Errorf("SCS\n got %v\nwant %v", got, wantSCS)
			}
			f, err := co.Frames(th, unwind.MethodFP)
			if err != nil {
				t.Fatalf("FP walk: %v", err)
			}
			if got := names(co, f); !slices.Equal(got, wantFP) {
				t.Errorf("FP\n got %v\nwant %v", got, wantFP)
			}
		})
	}
}

// TestGCSCoreThreads: the thread core holds both threads, each with its
// own NT_ARM_GCS and its own GCS mapping (the second one allocated by the
// kernel at clone). The crashing thread comes first; the main thread is
// in run_thread's pthread_join: in the shipped core three glibc frames
// down in the futex wait, in a rerun of kcore.sh still at
// __pthread_clockjoin_ex's first instruction (no entry of its own yet),
// so the test asks only that its GCS copy end with run_thread's callers.
func TestGCSCoreThreads(t *testing.T) {
	co := loadGCSCore(t, "thread")
	if len(co.Threads) != 2 {
		t.Fatalf("%d threads, want 2", len(co.Threads))
	}
	a, b := &co.Threads[0], &co.Threads[1]
	if !a.HasGCS || !b.HasGCS || !a.GCS.Enabled() || !b.GCS.Enabled() {
		t.Fatalf("GCS: %v %+v, %v %+v", a.HasGCS, a.GCS, b.HasGCS, b.GCS)
	}
	sa, _ := segmentOf(co, a.GCS.GCSPR)
	sb, _ := segmentOf(co, b.GCS.GCSPR)
	if sa == sb {
		t.Errorf("both GCSPR_EL0s (%#x, %#x) in one segment %+v", a.GCS.GCSPR, b.GCS.GCSPR, sa)
	}
	g, err := co.Frames(b, unwind.MethodGCS)
	if err != nil {
		t.Fatal(err)
	}
	got := names(co, g)
	want := []string{"run_thread", "main", "__libc_start_call_main", "__libc_start_main"}
	if len(got) < len(want) || !slices.Equal(got[len(got)-len(want):], want) || slices.Contains(got[:len(got)-len(want)], "?") {
		t.Errorf("main thread's GCS %v: want glibc's frames, then %v", got, want)
	}
}

// segmentOf returns the segment holding addr.
func segmentOf(co *core.Core, addr uint64) (core.Segment, bool) {
	for _, s := range co.Segments() {
		if addr >= s.Addr && addr < s.Addr+s.Size {
			return s, true
		}
	}
	return core.Segment{}, false
}

// TestGCSCoreDeep: gcs_descend overflowed its GCS (32 KiB: RLIMIT_STACK
// 64 KiB / 2, the kernel's default size) and Linux killed it with SIGSEGV
// at the push that found no GCS page. GCSPR_EL0 is the lowest slot of the
// mapping, whose 4096 slots hold 4095 return addresses and the top marker.
func TestGCSCoreDeep(t *testing.T) {
	co := loadGCSCore(t, "deep")
	th := &co.Threads[0]
	if th.Signal != 11 || co.Symbolizer().Func(th.Regs.PC) != "gcs_descend" {
		t.Fatalf("signal %d at %s", th.Signal, co.Symbolizer().Name(th.Regs.PC))
	}
	s, ok := segmentOf(co, th.GCS.GCSPR)
	if !ok || s.Addr != th.GCS.GCSPR || s.Size != 32<<10 || s.FileSize != s.Size || s.Flags&2 == 0 {
		t.Fatalf("GCSPR_EL0 %#x in segment %+v: want the bottom of a 32 KiB writable GCS held whole", th.GCS.GCSPR, s)
	}
	g, err := co.Frames(th, unwind.MethodGCS)
	if err != nil || len(g) != 4095 {
		t.Fatalf("GCS copy: %d frames, %v; want 4095", len(g), err)
	}
	got := names(co, g)
	d := 0
	for d < len(got) && got[d] == "gcs_descend" {
		d++
	}
	if want := []string{"run_deep", "main", "__libc_start_call_main", "__libc_start_main"}; d < 4000 || !slices.Equal(got[d:], want) {
		t.Errorf("%d gcs_descend entries, then %v; want > 4000, then %v", d, got[d:], want)
	}
}

// TestGCSCoresAgainstGDB: gdb 18 reads NT_ARM_GCS from a core (its
// $gcspr, in kcore.sh's "info registers gcspr", equals the note's
// GCSPR_EL0), and every caller frame of its backtrace (frame 1 on, from
// the call frame information, not the GCS) is the GCS copy's entry in
// order, except the frames gdb prints without an address (an inline
// frame's caller at the same pc, the frame a signal interrupted),
// _start, and the sigreturn trampoline gdb shows as "<signal handler
// called>".
func TestGCSCoresAgainstGDB(t *testing.T) {
	re := regexp.MustCompile(`(?m)^#(\d+)\s+0x([0-9a-f]+)(?: \[PAC\])? in (\w+)`)
	for _, sc := range []string{"chain", "leaf", "noframe", "recurse", "signal", "longjmp", "thread"} {
		t.Run(sc, func(t *testing.T) {
			co := loadGCSCore(t, sc)
			th := &co.Threads[0]
			txt, err := os.ReadFile(gcsCores + "/" + sc + ".gdb.txt")
			if err != nil {
				t.Fatal(err)
			}
			m := regexp.MustCompile(`(?m)^gcspr\s+0x([0-9a-f]+)`).FindSubmatch(txt)
			if m == nil {
				t.Fatal("gdb printed no $gcspr")
			}
			if v, _ := strconv.ParseUint(string(m[1]), 16, 64); v != th.GCS.GCSPR {
				t.Errorf("gdb's $gcspr %#x, NT_ARM_GCS gcspr_el0 %#x", v, th.GCS.GCSPR)
			}
			var want []uint64
			seen := map[string]bool{}
			for _, f := range re.FindAllStringSubmatch(string(txt), -1) {
				if seen[f[1]] || f[1] == "0" || f[3] == "_start" {
					seen[f[1]] = true
					continue
				}
				seen[f[1]] = true
				pc, _ := strconv.ParseUint(f[2], 16, 64)
				want = append(want, pc)
			}
			g, err := co.Frames(th, unwind.MethodGCS)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			tramp := 0
			for _, f := range g {
				if co.Symbolizer().Func(f.PC) == "" {
					tramp++
					continue
				}
				got = append(got, f.PC)
			}
			if len(want) < 4 || !slices.Equal(got, want) {
				t.Errorf("GCS %x\ngdb %x", got, want)
			}
			if n := strings.Count(string(txt), "<signal handler called>"); n != tramp || (sc == "signal") != (n == 1) {
				t.Errorf("%d unnamed GCS entries (the trampoline), %d signal frames in gdb's backtrace", tramp, n)
			}
		})
	}
}

// TestGCSNotInOtherCores: cores without NT_ARM_GCS (qemu-aarch64's, and
// the one Linux 6.1 wrote, testdata/kernel/usercore) give ErrNotSupported
// for the GCS method, as stack_trace_save_shadow gives -ENOSYS; and a
// thread whose NT_ARM_GCS says GCS is off likewise.
func TestGCSNotInOtherCores(t *testing.T) {
	check := func(what string, co *core.Core) {
		t.Helper()
		th := &co.Threads[0]
		_, err := co.Frames(th, unwind.MethodGCS)
		if !errors.Is(err, unwind.ErrNotSupported) || !errors.Is(err, unix.ENOSYS) || !strings.Contains(err.Error(), co.Path) {
			t.Errorf("%s: GCS copy: %v; want ErrNotSupported (ENOSYS) naming the core", what, err)
		}
	}
	for _, c := range captures(t)[:2] {
		co := load(t, c)
		if co.Threads[0].HasGCS {
			t.Errorf("%s: a qemu-aarch64 core with NT_ARM_GCS", c.path)
		}
		check(c.path, co)
	}
	b := gunzip(t, kernelCore+"/core.gz")
	co, err := core.Load("6.1.core", bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	check("Linux 6.1 core", co)

	bd := synthGCS(0, gcsTop-8)
	co, err = loadBytes(bd.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if th := &co.Threads[0]; !th.HasGCS || th.GCS.Enabled() {
		t.Fatalf("GCS %v %+v", th.HasGCS, th.GCS)
	}
	check("GCS off", co)
}
