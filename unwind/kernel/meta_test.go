package kernel_test

import (
	"encoding/binary"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// metaCaptures returns the shipped captures of kernels with meta frame
// records (6.13 and later); Debian sid's 7.2 must be one of them.
func metaCaptures(t *testing.T) []*kcapture.Capture {
	t.Helper()
	var out []*kcapture.Capture
	found72 := false
	for _, dir := range captures(t) {
		cp, err := kcapture.OpenCapture(dir)
		if err != nil {
			t.Fatal(err)
		}
		k, err := cp.Kernel(&cp.Expected.Stops[0])
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if k.ABI != fp.ABIMetaRecord {
			continue
		}
		out = append(out, cp)
		found72 = found72 || filepath.Base(dir) == "deb-7.2"
	}
	if !found72 {
		t.Fatal("no capture of Debian's 7.2 with meta records (testdata/kernel/deb-7.2)")
	}
	return out
}

// meta reads the 24-byte meta record {fp, lr, type} at va from the dump.
func meta(t *testing.T, k *kernel.Kernel, va uint64) [3]uint64 {
	t.Helper()
	var b [24]byte
	if err := k.V.ReadVirt(b[:], va); err != nil {
		t.Fatalf("meta record at %#x: %v", va, err)
	}
	return [3]uint64{binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}
}

// TestMetaRecordsOnRealKernel checks the frame-record ABI of kernels since
// 6.13 (arch/arm64/kernel/stacktrace.c: kunwind_next_frame_record_meta)
// on a real kernel, Debian sid's 7.2 under QEMU: the kernel package picks
// the rules itself (from the version, confirmed by the BTF's
// pt_regs.stackframe, a struct frame_record_meta), and every walk obeys
// each rule package fp's synthetic tests assert:
//   - a walk of a task ends successfully only at the FINAL meta record
//     {0, 0, FRAME_META_TYPE_FINAL} in the task's own pt_regs at the top of
//     its stack (the last frame's fp is that record);
//   - an exception boundary is a PT_REGS meta record {0, 0,
//     FRAME_META_TYPE_PT_REGS} embedded in the pt_regs EL1 entry pushed:
//     the next frame is that pt_regs' pc (OriginRegsPC) and the walk goes
//     on from its regs[29]; the layout is the BTF's;
//   - every other record the walk follows is an ordinary {fp, lr}, not a
//     {0, 0} record;
//   - where the kernel printed a source marker, "P" is exactly the
//     OriginRegsPC frames and "T" the blocked task's first frame
//     (OriginTask): the kernel's own unwinder says where each frame came
//     from, and it is where the FP walk says.
func TestMetaRecordsOnRealKernel(t *testing.T) {
	for _, cp := range metaCaptures(t) {
		t.Run(filepath.Base(cp.Dir), func(t *testing.T) {
			finals, boundaries, marked := 0, 0, 0
			for i := range cp.Expected.Stops {
				s := &cp.Expected.Stops[i]
				k, err := cp.Kernel(s)
				if err != nil {
					t.Fatal(err)
				}
				if notes := strings.Join(k.Notes, "; "); !strings.Contains(notes, "BTF: pt_regs.stackframe is a struct frame_record_meta") {
					t.Errorf("%s: the rules were not confirmed from BTF: %s", s.Name, notes)
				}
				if k.Regs.StackFrame+fp.MetaRecordSize > k.Regs.Size {
					t.Fatalf("%s: pt_regs %+v has no room for a meta record", s.Name, k.Regs)
				}
				rep := k.Unwind(s.Name == "t")
				check := func(what string, r *kernel.Result) {
					if r.End != fp.EndFinal {
						return
					}
					fs := r.Frames
					at := r.Walk.TaskPtRegs + k.Regs.StackFrame
					if m := meta(t, k, at); m != [3]uint64{0, 0, fp.MetaFinal} {
						t.Errorf("%s %s: task pt_regs stackframe at %#x is %#x, want {0, 0, FINAL}", s.Name, what, at, m)
					}
					if last := fs[len(fs)-1]; last.FP != at {
						t.Errorf("%s %s: the walk ends with fp %#x, not at the FINAL record %#x", s.Name, what, last.FP, at)
					}
					finals++
					for j := 1; j < len(fs); j++ {
						f, prev := fs[j], fs[j-1]
						if f.Origin == fp.OriginLR {
							continue // x30 is no record
						}
						m := meta(t, k, prev.FP)
						switch f.Origin {
						case fp.OriginRegsPC:
							boundaries++
							regs := prev.FP - k.Regs.StackFrame
							var b [8]byte
							rd := func(off uint64) uint64 {
								if err := k.V.ReadVirt(b[:], regs+off); err != nil {
									t.Fatalf("pt_regs at %#x: %v", regs, err)
								}
								return binary.LittleEndian.Uint64(b[:])
							}
							pc, x29, pstate := rd(k.Regs.PC), rd(k.Regs.X29), rd(k.Regs.PC+8)
							if m != [3]uint64{0, 0, fp.MetaPtRegs} || pc != f.Raw || x29 != f.FP || pstate>>2&3 != 1 {
								t.Errorf("%s %s frame %d: boundary record %#x at %#x, pt_regs pc %#x x29 %#x pstate %#x; frame raw %#x fp %#x",
									s.Name, what, j, m, prev.FP, pc, x29, pstate, f.Raw, f.FP)
							}
						case fp.OriginFrame:
							if m[0] == 0 && m[1] == 0 || m[0] != f.FP || m[1] != f.Raw {
								t.Errorf("%s %s frame %d: record at %#x is %#x, frame fp %#x raw %#x", s.Name, what, j, prev.FP, m[:2], f.FP, f.Raw)
							}
						default:
							t.Errorf("%s %s frame %d: origin %v inside a walk", s.Name, what, j, f.Origin)
						}
					}
				}
				for j := range rep.CPUs {
					check("cpu", &rep.CPUs[j].Result)
				}
				byPID := map[int]*kernel.TaskResult{}
				for j := range rep.Tasks {
					byPID[rep.Tasks[j].Task.PID] = &rep.Tasks[j]
					if !rep.Tasks[j].Running {
						check("task "+rep.Tasks[j].Task.Comm, &rep.Tasks[j].Result)
					}
				}
				// The printed source markers against the walk's origins.
				if s.Trace >= 0 && s.Name != "t" {
					tr := &cp.Expected.Traces[s.Trace]
					c := rep.CPUs[s.StoppedCPU]
					ws := kcapture.Strings(k, c.Frames)
					fs, printed, skip := c.Frames, tr.Frames, 0
					if s.Name == "x30" {
						// Stopped inside the function the kernel printed
						// from, at an earlier pc (as checkX30 compares).
						skip = kcapture.PrintedFrom(tr.Frames) + 1
						ws, fs, printed = ws[1:], fs[1:], tr.Frames[skip:]
					}
					at, err := kcapture.MatchPrinted(ws, printed)
					if err != nil {
						t.Fatalf("%s: %v", s.Name, err)
					}
					marked += checkSources(t, s.Name, tr, fs[at:], skip+kcapture.PrintedFrom(printed))
				}
				if s.Name != "t" {
					continue
				}
				for _, tr := range cp.Expected.Traces {
					if tr.Stop != "t" || tr.State == "R" || tr.PID < 0 {
						continue
					}
					w := byPID[tr.PID]
					if w == nil || w.End != fp.EndFinal || len(w.Frames) != len(tr.Frames) {
						t.Errorf("t: %s pid %d: no complete walk of %d frames", tr.Comm, tr.PID, len(tr.Frames))
						continue
					}
					marked += checkSources(t, "t "+tr.Comm, &tr, w.Frames, 0)
				}
			}
			if finals == 0 || boundaries == 0 || marked == 0 {
				t.Errorf("walks ended at FINAL %d, PT_REGS boundaries crossed %d, printed markers compared %d: want all > 0", finals, boundaries, marked)
			}
			t.Logf("%d walks end at their task's FINAL meta record, %d PT_REGS meta records crossed, %d printed source markers equal the walk's origins", finals, boundaries, marked)
		})
	}
}

// checkSources compares the source markers the kernel printed for
// tr.Frames[from:] with the origins of fs (the walk's frames matched to
// them, one for one) and returns how many markers it compared. A frame
// printed without a marker is an ordinary frame record; the walk may
// have it as x30 or the stopped pc, which the kernel printed later from
// a record.
func checkSources(t *testing.T, what string, tr *kcapture.Trace, fs []unwind.Frame, from int) int {
	t.Helper()
	if tr.Sources == nil {
		t.Errorf("%s: the kernel printed no source markers", what)
		return 0
	}
	n := 0
	for i, src := range tr.Sources[from:] {
		f := fs[i]
		var want []fp.Origin
		switch src {
		case "P":
			want = []fp.Origin{fp.OriginRegsPC}
		case "T":
			want = []fp.Origin{fp.OriginTask}
		case "":
			want = []fp.Origin{fp.OriginFrame, fp.OriginLR, fp.OriginStopPC}
		default:
			want = nil
		}
		if !slices.Contains(want, f.Origin) {
			t.Errorf("%s: printed %s (%s), the walk's origin is %v", what, tr.Frames[from+i], src, f.Origin)
		}
		if src != "" {
			n++
		}
	}
	return n
}

// TestABIFromBTF checks that the kernel's BTF decides the frame-record
// rules where the version would mislead: Debian's 6.12 dump claiming to be
// 6.13 keeps the final-record rules (its pt_regs.stackframe is a u64[2]),
// and the 7.2 dump claiming to be 6.12 keeps meta records (a struct
// frame_record_meta); unchanged, each agrees with its version.
func TestABIFromBTF(t *testing.T) {
	for _, c := range []struct {
		dir          string
		minor, major int
		want         fp.ABI
	}{
		{"deb-6.12", 13, 6, fp.ABIFinalRecord},
		{"deb-6.12", 12, 6, fp.ABIFinalRecord},
		{"deb-7.2", 12, 6, fp.ABIMetaRecord},
		{"deb-7.2", 2, 7, fp.ABIMetaRecord},
	} {
		cp, err := kcapture.OpenCapture("../../testdata/kernel/" + c.dir)
		if err != nil {
			t.Fatal(err)
		}
		s := &cp.Expected.Stops[0] // the stop whose vmcore holds the BTF
		v, err := cp.Vmcore(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		real := fp.ABIFor(v.Info.Major, v.Info.Minor)
		v.Info.Major, v.Info.Minor = c.major, c.minor
		k, err := kernel.New(v, cp.Syms, kernel.Options{Current: s.SPEL0()})
		if err != nil {
			t.Fatal(err)
		}
		notes := strings.Join(k.Notes, "; ")
		agree := fp.ABIFor(c.major, c.minor) == real
		if k.ABI != c.want || agree != strings.Contains(notes, "as the version says") {
			t.Errorf("%s as %d.%d: rules %v, want %v; notes: %s", c.dir, c.major, c.minor, k.ABI, c.want, notes)
		}
	}
}
