package gcs_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/gcscases"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/gcs"
	"github.com/unwindkit/unwindkit/unwind/snapshot"
)

const captures = "../../testdata/arm64/gcs/snapshots"

// capture is one shipped GCS capture with gdb's backtrace (the "gdb" field
// the loader ignores).
type capture struct {
	name string
	s    *snapshot.Snapshot
	gdb  []gdbFrame
}

type gdbFrame struct {
	PC   uint64
	Func string
	Type string
}

func loadCaptures(t testing.TB) []capture {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(captures, "*.json"))
	if len(files) != 8 {
		t.Fatalf("found %d GCS captures in %s, want 8", len(files), captures)
	}
	var out []capture
	for _, path := range files {
		s, err := snapshot.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			GDB struct {
				Backtrace []struct{ PC, Func, Type string }
			}
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		c := capture{name: strings.TrimSuffix(filepath.Base(path), ".json"), s: s}
		for _, f := range doc.GDB.Backtrace {
			pc, err := strconv.ParseUint(f.PC, 0, 64)
			if err != nil {
				t.Fatal(err)
			}
			c.gdb = append(c.gdb, gdbFrame{pc, f.Func, f.Type})
		}
		out = append(out, c)
	}
	return out
}

func view(t testing.TB, s *snapshot.Snapshot) gcs.View {
	t.Helper()
	base, data, ok := s.GCSRegion()
	if !ok {
		t.Fatal("capture has no GCS")
	}
	return gcs.NewSnapshotView(data, base, s.Regs.GCSPR)
}

func funcName(s *snapshot.Snapshot, pc uint64) string {
	if n := s.Symbolizer().Func(pc); n != "" {
		return n
	}
	return "?"
}

// gcsNames copies the capture's GCS (Save, bounded by a 4096-entry store)
// and symbolizes it; Frames must give the same PCs.
func gcsNames(t *testing.T, s *snapshot.Snapshot) ([]string, []uint64) {
	t.Helper()
	v := view(t, s)
	store := make([]uint64, 4096)
	n, err := gcs.Save(&v, store, 0)
	if err != nil {
		t.Fatalf("gcs.Save: %v", err)
	}
	var pcs []uint64
	for f, err := range gcs.Frames(&v) {
		if err != nil {
			t.Fatalf("gcs.Frames: %v", err)
		}
		if f.Origin != fp.OriginGCS {
			t.Errorf("frame %v: origin %v", f, f.Origin)
		}
		pcs = append(pcs, f.PC)
	}
	if !slices.Equal(pcs, store[:n]) {
		t.Errorf("Frames %x, Save %x", pcs, store[:n])
	}
	var names []string
	for _, pc := range store[:n] {
		names = append(names, funcName(s, pc))
	}
	return names, store[:n]
}

func otherNames(t *testing.T, s *snapshot.Snapshot, m unwind.Method) []string {
	t.Helper()
	src, err := s.Source(m)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for f, err := range src.Frames() {
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		out = append(out, funcName(s, f.PC))
	}
	return out
}

// TestCapturesThreeTechniques unwinds each real capture (GCC 16, glibc
// 2.43, qemu-aarch64 11.1 -cpu max) with the GCS copy, the SCS copy and
// the FP walk side by side, each against the known chain from the source
// minus exactly what its rules say it cannot see:
//
//   - GCS: the innermost pc and the pc a signal interrupted (no return
//     addresses), and _start (running when glibc's __libc_start_main
//     enabled GCS; a second thread's GCS, allocated at clone, holds all
//     of its frames). It sees the leaf's caller, the assembly function
//     without a frame record and its caller, glibc's frames and the
//     sigreturn trampoline.
//   - SCS: the innermost pc, the interrupted pc, everything above main
//     (glibc and gcsrt.c are not instrumented), a leaf's caller (no push in
//     the leaf), the caller of the assembly function (no push in it); and
//     after a longjmp two dead slots, since glibc's jmp_buf holds no x18.
//   - FP: the leaf's caller (only in x30) and the caller of the assembly
//     function (no frame record: the walk goes from its callee's record to
//     its caller's caller).
func TestCapturesThreeTechniques(t *testing.T) {
	for _, c := range loadCaptures(t) {
		t.Run(c.name, func(t *testing.T) {
			s := c.s
			if !s.HasGCS || !s.HasSCS {
				t.Fatalf("HasGCS %v HasSCS %v", s.HasGCS, s.HasSCS)
			}
			gotGCS, _ := gcsNames(t, s)
			if c.name == "deep" {
				return // TestCaptureDeep
			}
			e := s.Expect
			wantGCS, wantSCS, wantFP := gcscases.Want(c.name, e)
			if !slices.Equal(gotGCS, wantGCS) {
				t.Errorf("GCS\n got %v\nwant %v", gotGCS, wantGCS)
			}
			if got := otherNames(t, s, unwind.MethodSCS); !slices.Equal(got, wantSCS) {
				t.Errorf("SCS\n got %v\nwant %v", got, wantSCS)
			}
			if got := otherNames(t, s, unwind.MethodFP); !slices.Equal(got, wantFP) {
				t.Errorf("FP\n got %v\nwant %v", got, wantFP)
			}
		})
	}
}

// TestCapturesAgainstGDB checks the GCS copy's return addresses against
// gdb 18's backtrace of the same stop, address for address: every
// caller frame gdb finds (frame 1 on) is a GCS entry, in order, except
// its inline frames (with_scs, at main's pc), the frame a signal
// interrupted (its pc is in the sigcontext) and _start; gdb names QEMU's
// sigreturn trampoline (sigreturn_region_end, in QEMU's vDSO) at the pc
// the GCS holds as the handler's return address.
func TestCapturesAgainstGDB(t *testing.T) {
	for _, c := range loadCaptures(t) {
		t.Run(c.name, func(t *testing.T) {
			_, got := gcsNames(t, c.s)
			if c.name == "deep" {
				if len(c.gdb) != 1 || c.gdb[0].Func != "gcs_descend" {
					t.Fatalf("gdb's backtrace at the overflow: %v", c.gdb)
				}
				return
			}
			if len(c.gdb) < 6 || c.gdb[0].Func != c.s.Expect[0] || c.gdb[0].PC != c.s.Regs.PC {
				t.Fatalf("gdb's backtrace does not start at the capture point: %v", c.gdb)
			}
			var want []uint64
			for i := 1; i < len(c.gdb); i++ {
				f := c.gdb[i]
				if f.Type == "inline" || f.Func == "_start" || c.gdb[i-1].Type == "sigtramp" {
					continue
				}
				want = append(want, f.PC)
			}
			if !slices.Equal(got, want) {
				t.Errorf("GCS %x\ngdb %x", got, want)
			}
			if c.name == "signal" && !slices.ContainsFunc(c.gdb, func(f gdbFrame) bool { return f.Type == "sigtramp" }) {
				t.Error("gdb found no signal frame")
			}
		})
	}
}

// TestCaptureDeep: the descent stopped at the SIGSEGV of the push that
// found the guard page. GCSPR_EL0 is the lowest address of the GCS (full:
// 32 KiB, 4096 entries with the marker), every entry but the few of the
// start chain is gcs_descend's own return address, and a bounded store
// stops the copy without reading on.
func TestCaptureDeep(t *testing.T) {
	cs := loadCaptures(t)
	i := slices.IndexFunc(cs, func(c capture) bool { return c.name == "deep" })
	s := cs[i].s
	base, data, _ := s.GCSRegion()
	if s.Regs.GCSPR != base || len(data) != 32<<10 {
		t.Fatalf("GCSPR %#x, region [%#x, +%#x): want a full 32 KiB GCS", s.Regs.GCSPR, base, len(data))
	}
	if f := s.Symbolizer().Func(s.Regs.PC); f != "gcs_descend" {
		t.Fatalf("stopped in %q", f)
	}
	v := gcs.NewSnapshotView(data, base, s.Regs.GCSPR)
	all := make([]uint64, 5000)
	n, err := gcs.Save(&v, all, 0)
	if err != nil || n != 4095 {
		t.Fatalf("Save: %d entries, %v; want 4095 (4096 slots less the marker)", n, err)
	}
	d := 0
	for _, pc := range all[:n] {
		if s.Symbolizer().Func(pc) == "gcs_descend" {
			d++
		}
	}
	tail := []string{}
	for _, pc := range all[d:n] {
		tail = append(tail, funcName(s, pc))
	}
	if want := []string{"run_deep", "main", "__libc_start_call_main", "__libc_start_main"}; d < 4000 || !slices.Equal(tail, want) {
		t.Errorf("%d gcs_descend entries, then %v; want > 4000, then %v", d, tail, want)
	}
	small := make([]uint64, 64)
	if n, err := gcs.Save(&v, small, 10); n != 64 || err != nil || small[0] != all[10] {
		t.Errorf("bounded Save: %d %v", n, err)
	}
	// The same GCS with its top page cut off: the copy names the end.
	v.Data = data[:len(data)-4096]
	if _, err := gcs.Save(&v, all, 0); !errors.Is(err, gcs.ErrCorrupt) || !strings.Contains(err.Error(), gcs.RuleGCSNoTop) {
		t.Errorf("truncated GCS: %v", err)
	}
}

// TestCaptureSignalFrames: Frames marks the signal boundary of the real
// signal capture: the handler's frames are in context 0, the trampoline
// entry is SigReturn, and the interrupted context's entries are in
// context 1, above the signal cap token QEMU pushed (the slot's own
// address with bits 11:0 clear, as Linux's GCS_SIGNAL_CAP).
func TestCaptureSignalFrames(t *testing.T) {
	cs := loadCaptures(t)
	i := slices.IndexFunc(cs, func(c capture) bool { return c.name == "signal" })
	s := cs[i].s
	v := view(t, s)
	var got []string
	for e, err := range gcs.Entries(&v) {
		if err != nil {
			t.Fatal(err)
		}
		f := e.Frame
		n := funcName(s, f.PC)
		if e.SigReturn {
			n = "sigreturn"
			base, data, _ := s.GCSRegion()
			at := f.Addr + 8 - base
			cp := uint64(data[at]) | uint64(data[at+1])<<8 | uint64(data[at+2])<<16 | uint64(data[at+3])<<24 |
				uint64(data[at+4])<<32 | uint64(data[at+5])<<40 | uint64(data[at+6])<<48 | uint64(data[at+7])<<56
			if cp != gcs.SignalCap(f.Addr+8) || gcs.Classify(cp, f.Addr+8) != gcs.KindSignalCap {
				t.Errorf("entry above the trampoline: %#x", cp)
			}
		}
		got = append(got, n+"/"+strconv.Itoa(e.Signal))
	}
	want := []string{"handler_mid/0", "on_usr1/0", "sigreturn/0", "sig_mid/1", "run_signal/1", "main/1",
		"__libc_start_call_main/1", "__libc_start_main/1"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

// TestCaptureWithoutGCS: a capture of a program without GCS (the SCS
// captures of testdata/arm64/snapshots) has no GCS region, and the copy
// of what it gives says ErrNotSupported, as stack_trace_save_shadow says
// -ENOSYS.
func TestCaptureWithoutGCS(t *testing.T) {
	s, err := snapshot.Open("../../testdata/arm64/snapshots/gcc-nopac-pauth-chain.json")
	if err != nil {
		t.Fatal(err)
	}
	base, data, ok := s.GCSRegion()
	if s.HasGCS || ok || data != nil {
		t.Fatalf("HasGCS %v, GCSRegion %#x %d %v", s.HasGCS, base, len(data), ok)
	}
	v := gcs.NewSnapshotView(data, base, s.Regs.GCSPR)
	if n, err := gcs.Save(&v, make([]uint64, 8), 0); n != 0 || !errors.Is(err, gcs.ErrNotSupported) {
		t.Errorf("Save: %d %v", n, err)
	}
	if _, err := s.Source(unwind.MethodGCS); !errors.Is(err, unwind.ErrNotSupported) {
		t.Errorf("snapshot.Source(MethodGCS): %v, want ErrNotSupported", err)
	}
}

// TestCaptureThread: a second thread's GCS is a region of its own (not
// the main thread's), ending with the top marker its creation wrote, and
// holds the thread's whole chain down to glibc's thread_start.
func TestCaptureThread(t *testing.T) {
	cs := loadCaptures(t)
	get := func(name string) *snapshot.Snapshot {
		return cs[slices.IndexFunc(cs, func(c capture) bool { return c.name == name })].s
	}
	mb, md, _ := get("chain").GCSRegion()
	tb, td, _ := get("thread").GCSRegion()
	if tb < mb+uint64(len(md)) && mb < tb+uint64(len(td)) {
		t.Errorf("thread GCS [%#x, +%#x) overlaps the main thread's [%#x, +%#x)", tb, len(td), mb, len(md))
	}
	for _, d := range [][]byte{md, td} {
		if len(d) < 8 || !slices.Equal(d[len(d)-8:], make([]byte, 8)) {
			t.Errorf("region does not end with the top marker")
		}
	}
	got, _ := gcsNames(t, get("thread"))
	if len(got) == 0 || got[len(got)-1] != "thread_start" {
		t.Errorf("thread's GCS: %v", got)
	}
}

// TestFrontDoor: the front door's GCS Source (snapshot.Source with
// unwind.MethodGCS, and unwind.NewGCSSource over the same bytes) gives
// what gcs.Save and gcs.Frames give on every real capture, for every
// skip and a store that cuts the trace short, named by the capture's
// symbols; SaveToDepot stores that trace.
func TestFrontDoor(t *testing.T) {
	for _, c := range loadCaptures(t) {
		v := view(t, c.s)
		want := make([]uint64, 8192)
		n, werr := gcs.Save(&v, want, 0)
		want = want[:n]
		src, err := c.s.Source(unwind.MethodGCS)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		base, data, _ := c.s.GCSRegion()
		direct := unwind.NewGCSSource(data, base, c.s.Regs.GCSPR, unwind.SourceOptions{})
		for _, s := range []*unwind.Source{src, direct} {
			if s.Method() != unwind.MethodGCS {
				t.Fatalf("%s: method %v", c.name, s.Method())
			}
			for _, skip := range []int{0, 1, 3, n, n + 1} {
				for _, size := range []int{len(want) + 1, max(len(want)/2, 1)} {
					got := make([]uint64, size)
					k, err := unwind.Save(s, got, skip)
					w := want[min(skip, len(want)):]
					w = w[:min(len(w), size)]
					if !slices.Equal(got[:k], w) || (err == nil) != (werr == nil || size <= len(w)) {
						t.Fatalf("%s: skip %d size %d: %x %v, want %x %v", c.name, skip, size, got[:k], err, w, werr)
					}
				}
			}
			var fr []uint64
			for f, err := range s.Frames() {
				if err != nil {
					break
				}
				if f.Origin != fp.OriginGCS || f.Raw != f.PC || f.Addr < base || f.Addr >= base+uint64(len(data)) {
					t.Fatalf("%s: frame %+v", c.name, f)
				}
				fr = append(fr, f.PC)
			}
			if !slices.Equal(fr, want) {
				t.Fatalf("%s: Frames %x, Save %x", c.name, fr, want)
			}
		}
		if len(want) > 0 && funcName(c.s, want[0]) != strings.TrimSuffix(strings.SplitN(src.Name(want[0]), "+", 2)[0], "") {
			t.Errorf("%s: Source.Name(%#x) = %q, the capture's symbols say %q", c.name, want[0], src.Name(want[0]), funcName(c.s, want[0]))
		}
	}
	none := unwind.NewGCSSource(nil, 0, 0, unwind.SourceOptions{})
	if _, err := unwind.Save(none, make([]uint64, 4), 0); !errors.Is(err, unwind.ErrNotSupported) {
		t.Errorf("no GCS: %v, want ErrNotSupported", err)
	}
}
