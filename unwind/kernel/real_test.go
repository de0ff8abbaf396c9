package kernel_test

import (
	"errors"
	"fmt"
	"github.com/unwindkit/unwindkit/unwind"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
	"golang.org/x/sys/unix"
)

// captures returns the shipped kernel captures that have trimmed vmcores.
func captures(t *testing.T) []string {
	t.Helper()
	ms, err := filepath.Glob("../../testdata/kernel/*/syms.txt.gz")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, filepath.Dir(m))
	}
	// Debian's 6.1, 6.12 and (sid's) 7.2 are shipped; SCS builds join
	// when captured.
	for _, want := range []string{"deb-6.1", "deb-6.12", "deb-7.2"} {
		found := false
		for _, d := range out {
			found = found || filepath.Base(d) == want
		}
		if !found {
			t.Errorf("capture %s with trimmed vmcores is missing", want)
		}
	}
	return out
}

// TestRealKernelsMatchPrintedTrace checks, on every shipped capture of a
// real kernel, that the FP walk over the vmcore with the kernel's own rules
// contains the kernel's printed Call trace frame by frame
// (function+offset/size), for the stopped CPU of each stop (from its
// dumped registers, across the IRQ stack and pt_regs into the interrupted
// task, down to the final frame) and for every blocked task of sysrq-t
// (from cpu_context).
func TestRealKernelsMatchPrintedTrace(t *testing.T) {
	defer func() {
		for r, n := range rules {
			t.Logf("SCS copy lacks %3d frames: %s", n, r)
		}
		for r, n := range scsOnly {
			t.Logf("SCS copy alone has %3d frames: %s", n, r)
		}
	}()
	for _, dir := range captures(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			cp, err := kcapture.OpenCapture(dir)
			if err != nil {
				t.Fatal(err)
			}
			cpuFrames, taskTraces, taskFrames, scsRows, x30Stops, printedSCS := 0, 0, 0, 0, 0, 0
			for i := range cp.Expected.Stops {
				s := &cp.Expected.Stops[i]
				k, err := cp.Kernel(s)
				if err != nil {
					t.Fatalf("%s: %v", s.Name, err)
				}
				in := &k.V.Info
				if k.ABI != fp.ABIFor(in.Major, in.Minor) || (in.Major == 6 && in.Minor <= 12 && k.ABI != fp.ABIFinalRecord) {
					t.Errorf("%s: kernel %s got rules %v", s.Name, in.OSRelease, k.ABI)
				}
				if i == 0 {
					checkTable(t, k)
				}
				// The current task read from the dump (per_cpu(__entry_task))
				// is gdb's SP_EL0 wherever the CPU ran in the kernel.
				for cpu, sp0 := range s.SPEL0() {
					if sp0 < k.V.PageOffset || cpu >= len(k.V.CPUs) {
						continue
					}
					if cur, how, err := k.Current(cpu); err != nil || cur != sp0 {
						t.Errorf("%s: cpu %d: current %#x (%s, %v), gdb's SP_EL0 %#x", s.Name, cpu, cur, how, err, sp0)
					} else if how != "per_cpu(__entry_task)" {
						t.Errorf("%s: cpu %d: current from %s, want per_cpu(__entry_task)", s.Name, cpu, how)
					}
				}
				rep := k.Unwind(s.Name == "t")
				c := rep.CPUs[s.StoppedCPU]
				if c.Err != nil || c.End != fp.EndFinal {
					t.Fatalf("%s: cpu %d walk ended %v: %v", s.Name, s.StoppedCPU, c.End, c.Err)
				}
				ws := kcapture.Strings(k, c.Frames)
				finals := 0
				for _, r := range rep.CPUs {
					if r.End == fp.EndFinal {
						finals++
						if r.Final != [2]uint64{} {
							t.Errorf("%s: cpu %d: final record %#x, want {0, 0}", s.Name, r.CPU, r.Final)
						}
					}
				}
				defer func(name string) {
					if finals == 0 {
						t.Errorf("%s: no walk ended at a final record", name)
					}
				}(s.Name)
				for _, r := range rep.Tasks {
					if r.End == fp.EndFinal {
						finals++
						if r.Final != [2]uint64{} {
							t.Errorf("%s: task %d: final record %#x, want {0, 0}", s.Name, r.Task.PID, r.Final)
						}
					}
				}
				if !k.HasSCS() && !errors.Is(c.SCSErr, unix.ENOSYS) {
					t.Errorf("%s: SCS copy of a kernel without SCS: %v, want ENOSYS", s.Name, c.SCSErr)
				}
				if s.Trace < 0 {
					t.Fatalf("%s: no printed trace for the stopped CPU", s.Name)
				}
				printed := cp.Expected.Traces[s.Trace].Frames
				if s.Name == "x30" {
					x30Stops++
					checkX30(t, k, s, &c, ws, printed)
				} else if _, err := kcapture.MatchPrinted(ws, printed); err != nil {
					t.Errorf("%s: cpu %d: %v\nwalk:    %s\nprinted: %s", s.Name, s.StoppedCPU, err, strings.Join(ws, " "), strings.Join(printed, " "))
				}
				n := len(printed) - kcapture.PrintedFrom(printed)
				cpuFrames += n
				how := "contains"
				t.Logf("%s: cpu %d: walk of %d frames %s the %d printed frames from %s; stacks: %s", s.Name, s.StoppedCPU, len(ws), how, n, printed[kcapture.PrintedFrom(printed)], stacksString(c.Walk))
				checkScenario(t, cp, k, s, c.Frames, ws)
				// Only the x30 stop is inside a prologue after its SCS push;
				// the others stop at a function's first instruction.
				if c.Prologue.PushedUnlinked() != (s.Name == "x30") || c.PrologueErr != nil {
					t.Errorf("%s: cpu %d: prologue %v (%v)", s.Name, s.StoppedCPU, c.Prologue, c.PrologueErr)
				}
				if k.HasSCS() {
					for _, o := range rep.CPUs {
						if o.End == fp.EndFinal {
							scsRows += checkSCS(t, k, fmt.Sprintf("%s cpu %d", s.Name, o.CPU), o.SCS, o.Frames, o.SCSErr, o.SCSNotes)
						}
					}
					// The x18 policy of call_on_irq_stack, read from its code,
					// is the one the capture's kernel was built with.
					want := scs.ThreadInfo
					switch {
					case strings.HasSuffix(dir, "-onstack"):
						want = scs.OnStack
					case strings.HasSuffix(dir, "-percpu"):
						want = scs.PerCPU
					}
					if rep.SCSPolicy != want {
						t.Errorf("%s: x18 policy %q, want %q", s.Name, rep.SCSPolicy, want)
					}
					if tr := cp.Expected.Traces[s.Trace]; tr.SCS != nil {
						printedSCS += checkPrintedSCS(t, k, s, &c, tr.SCS)
					}
				}
				if s.Name != "t" {
					continue
				}
				if rep.TasksErr != nil {
					t.Fatalf("task list: %v", rep.TasksErr)
				}
				byPID := map[int]*kernel.TaskResult{}
				for j := range rep.Tasks {
					byPID[rep.Tasks[j].Task.PID] = &rep.Tasks[j]
				}
				for _, tr := range cp.Expected.Traces {
					if tr.Scenario != "t" || tr.PID < 0 {
						continue
					}
					if tr.State == "R" {
						// Runnable or running: its cpu_context may change
						// between the dump and the print (the writer, sh,
						// is the stopped CPU's trace above).
						t.Logf("t: %s (pid %d) state R: not compared", tr.Comm, tr.PID)
						continue
					}
					taskTraces++
					w := byPID[tr.PID]
					if w == nil {
						t.Errorf("t: printed task %s pid %d is not in the dump's task list", tr.Comm, tr.PID)
						continue
					}
					got := kcapture.Strings(k, w.Frames)
					if w.Err != nil || w.End != fp.EndFinal || strings.Join(got, " ") != strings.Join(tr.Frames, " ") {
						t.Errorf("t: %s pid %d: walk (%v %v)\n  %s\nprinted\n  %s", tr.Comm, tr.PID, w.End, w.Err, strings.Join(got, " "), strings.Join(tr.Frames, " "))
						continue
					}
					taskFrames += len(got)
					if k.HasSCS() {
						scsRows += checkSCS(t, k, "t "+tr.Comm, w.SCS, w.Frames, w.SCSErr, nil)
					}
				}
			}
			if taskTraces == 0 {
				t.Error("no blocked task compared")
			}
			if strings.HasPrefix(filepath.Base(dir), "scs-") && x30Stops == 0 {
				t.Error("no stop after an SCS push (x30)")
			}
			if strings.HasSuffix(dir, "-percpu") && printedSCS == 0 {
				t.Error("no stop's trace comes with the kernel's own SCS copy (scs-percpu.patch prints it in show_regs)")
			}
			t.Logf("stopped CPUs: %d printed frames matched; blocked tasks: %d traces, %d frames matched exactly; SCS copy: %d frames missing, each explained", cpuFrames, taskTraces, taskFrames, scsRows)
		})
	}
}

// checkScenario checks what each stop must show beyond the printed trace.
func checkScenario(t *testing.T, cp *kcapture.Capture, k *kernel.Kernel, s *kcapture.Stop, fs []unwind.Frame, ws []string) {
	t.Helper()
	last := kcapture.FuncOf(ws[len(ws)-1])
	if last != "el0t_64_sync" && last != "ret_from_fork" {
		t.Errorf("%s: the walk ends in %s, not at a task's first frame", s.Name, ws[len(ws)-1])
	}
	signed := 0
	for _, f := range fs {
		if f.Raw != f.PC {
			signed++
		}
	}
	// A kernel whose dynamic shadow call stack is on runs on CPUs without
	// pointer authentication (it turns the SCS on only there): nothing is
	// signed. Every other capture's kernel signs with pac-ret.
	if dyn := dynamicSCS(k) && k.HasSCS(); dyn != (signed == 0) {
		t.Errorf("%s: %d PAC-signed return addresses stripped, dynamic SCS on: %v", s.Name, signed, dyn)
	}
	// Every stop is before the stopped function linked its frame record
	// (at its first instruction, or at x30 after its SCS push): x30 is
	// reported second.
	second := fp.OriginLR
	if fs[0].Origin != fp.OriginStopPC || kcapture.FuncOf(ws[0]) != s.Func || fs[1].Origin != second {
		t.Errorf("%s: the walk starts %s (%v), %v; want the breakpoint function %s and x30", s.Name, ws[0], fs[0].Origin, fs[1].Origin, s.Func)
	}
	switch s.Name {
	case "l-ipi":
		// Across the IRQ stack into the interrupted task: call_on_irq_stack's
		// record is the last on the IRQ stack, el1h_64_irq's pt_regs follow.
		irq, task, col, el1 := false, false, false, false
		for i, f := range fs {
			irq = irq || f.Stack == fp.IRQ
			task = task || f.Stack == fp.Task && irq
			col = col || kcapture.FuncOf(ws[i]) == "call_on_irq_stack" && f.Stack == fp.IRQ
			el1 = el1 || kcapture.FuncOf(ws[i]) == "el1h_64_irq"
		}
		if !irq || !task || !col || !el1 {
			t.Errorf("l-ipi: irq stack %v, then task stack %v, call_on_irq_stack %v, el1h_64_irq %v", irq, task, col, el1)
		}
		// Exactly one exception boundary: the frame after el1h_64_irq is
		// the interrupted pc, from the synthetic record in pt_regs (6.12
		// prints the trace from there: show_regs).
		var b []int
		for i, f := range fs {
			if f.Origin == fp.OriginRegsPC {
				b = append(b, i)
			}
		}
		if len(b) != 1 || kcapture.FuncOf(ws[b[0]-1]) != "el1h_64_irq" {
			t.Errorf("l-ipi: exception boundaries at %v", b)
		} else if p := cp.Expected.Traces[s.Trace].Frames; !(k.V.Info.Major == 6 && k.V.Info.Minor == 1) && ws[b[0]] != p[kcapture.PrintedFrom(p)] {
			t.Errorf("l-ipi: 6.12 and 7.2 print from %s, the boundary is %s", p[kcapture.PrintedFrom(p)], ws[b[0]])
		}
	case "l-syscall", "t", "x30":
		if last != "el0t_64_sync" {
			t.Errorf("%s: the writer's syscall does not end at el0t_64_sync: %s", s.Name, ws[len(ws)-1])
		}
	}
}

// checkSCS checks, on a kernel with shadow call stacks, that the SCS copy
// gives the FP walk's frames minus only those a named rule explains, and
// returns how many frames it lacks.
// rules counts the explanations of frames the SCS copy lacks, over all
// captures (logged by TestRealKernelsMatchPrintedTrace).
var rules = map[string]int{}

// scsOnly counts the explanations of frames only the SCS copy has.
var scsOnly = map[string]int{}

// checkX30 checks the stop placed after a prologue's SCS push and before
// its frame record is linked: the caller's return address is still only
// in x30, which the prologue analysis of the code in the dump says, so
// the FP walk reports it second (PAC stripped) and the SCS copy has it as
// its newest entry; the two agree on every frame but the stopped pc, and
// the kernel's printed trace (taken later, from deeper in the same call)
// confirms the frame: the walk is the printed trace (the stopped function
// prints at the offset of its later call). The old walk reported x30 only
// at a function's first instruction and lacked this frame.
// dynamicSCS reports whether k was built with a dynamic shadow call
// stack (CONFIG_DYNAMIC_SCS defines the static key).
func dynamicSCS(k *kernel.Kernel) bool { return kernel.SymAddr(k, "dynamic_scs_enabled") != 0 }

func checkX30(t *testing.T, k *kernel.Kernel, s *kcapture.Stop, c *kernel.CPUResult, ws, printed []string) {
	t.Helper()
	if !k.HasSCS() || c.SCSErr != nil {
		t.Fatalf("x30: SCS copy: %v", c.SCSErr)
	}
	// A dynamic shadow call stack (scs-7.2, on a CPU without PAC) has its
	// push where the compiler put paciasp, which the kernel rewrote at boot
	// (read from the dump's text, not the vmlinux's): no signing, the push
	// at +0. Every other SCS kernel signs, then pushes.
	dynamic := dynamicSCS(k)
	if !c.Prologue.PushedUnlinked() || c.Prologue.Func != s.Func || c.Prologue.X30 != kernel.X30Live || (c.Prologue.SignAt < 0) != dynamic || dynamic && c.Prologue.SCSPushAt != 0 {
		t.Errorf("x30: prologue %v (%v), want %s after its SCS push (dynamic SCS %v: paciasp patched into it), x29 not set", c.Prologue, c.PrologueErr, s.Func, dynamic)
	}
	x30 := k.V.CPUs[s.StoppedCPU].Regs.X[30]
	if len(c.SCS) == 0 || c.SCS[0].Raw != x30 || c.SCS[0].PC != k.V.Layout.Strip(x30) || c.SCS[0].Origin != fp.OriginSCS {
		t.Fatalf("x30: the SCS's newest entry is not x30 %#x: %v", x30, c.SCS)
	}
	if (x30 == c.SCS[0].PC) != dynamic {
		t.Errorf("x30: %#x signed %v, want %v (paciasp ran before the stop unless patched away)", x30, x30 != c.SCS[0].PC, !dynamic)
	}
	if f := c.Frames[1]; f.Origin != fp.OriginLR || f.Raw != x30 || f.PC != c.SCS[0].PC {
		t.Errorf("x30: the walk's second frame %#x (raw %#x, %v), want x30 %#x stripped", f.PC, f.Raw, f.Origin, x30)
	}
	notes := strings.Join(c.Walk.Notes, "; ")
	if !strings.Contains(notes, "reported second") || !strings.Contains(notes, "str x30, [x18], #8") {
		t.Errorf("x30: the walk's notes do not name the deciding instructions: %s", notes)
	}
	cmp := k.Compare(c.SCS, c.Frames, nil, nil)
	for i, r := range cmp.Rows {
		if !r.InFP || !r.InSCS && i != 0 {
			t.Errorf("x30: row %d only in one technique: %q\n%s", i, r.Note, cmp)
		}
	}
	p := kcapture.PrintedFrom(printed)
	if kcapture.FuncOf(ws[0]) != kcapture.FuncOf(printed[p]) {
		t.Errorf("x30: stopped in %s, printed from %s", ws[0], printed[p])
	}
	if at, err := kcapture.MatchPrinted(ws[1:], printed[p+1:]); err != nil || at != 0 {
		t.Errorf("x30: FP walk vs printed (at %d): %v\nwalk:    %s\nprinted: %s", at, err, strings.Join(ws, " "), strings.Join(printed, " "))
	}
}

func checkSCS(t *testing.T, k *kernel.Kernel, what string, scsF, fpF []unwind.Frame, scsErr error, notes []string) int {
	t.Helper()
	if scsErr != nil {
		t.Errorf("%s: SCS copy: %v", what, scsErr)
		return 0
	}
	cmp := k.Compare(scsF, fpF, scsErr, nil)
	n := 0
	for _, r := range cmp.Rows {
		switch {
		case r.InSCS && r.InFP:
		case r.InSCS && strings.HasPrefix(r.Note, kernel.NoteSCSOnlyPushedUnlinked):
			scsOnly[r.Note]++
		case r.InSCS:
			t.Errorf("%s: frame %s only on the SCS: %s", what, cmp.Name(r.SCS.PC), r.Note)
		case r.Note == "" || strings.HasPrefix(r.Note, "UNEXPLAINED"):
			t.Errorf("%s: frame %s missing from the SCS copy: %q", what, cmp.Name(r.FP.PC), r.Note)
		default:
			n++
			rules[r.Note]++
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("%s: SCS %d frames, FP %d; %s\n%s", what, len(scsF), len(fpF), strings.Join(notes, "; "), cmp)
	}
	return n
}

// checkPrintedSCS checks the SCS copy of the stopped CPU against the copy
// the kernel printed for the same call right after the stop
// (scs-percpu.patch: show_regs prints what arch_stack_walk_shadow copies,
// from x18 and the per-CPU saved pointers, before the Call trace): entry
// for entry, from the printed copy's first entry outside the printing
// code (show_shadow_call_stack, show_regs, nmi_cpu_backtrace: they ran
// after the stop). It returns the number of entries compared.
func checkPrintedSCS(t *testing.T, k *kernel.Kernel, s *kcapture.Stop, c *kernel.CPUResult, printed []string) int {
	t.Helper()
	if c.SCSErr != nil {
		t.Errorf("%s: SCS copy: %v", s.Name, c.SCSErr)
		return 0
	}
	got := kcapture.Strings(k, c.SCS)
	p := kcapture.PrintedFrom(printed)
	if p == 0 || strings.Join(got, " ") != strings.Join(printed[p:], " ") {
		t.Errorf("%s: cpu %d: SCS copy of %d entries is not the kernel's printed copy of %d from entry %d\ncopy:    %s\nprinted: %s\nnotes: %s",
			s.Name, s.StoppedCPU, len(got), len(printed)-p, p, strings.Join(got, " "), strings.Join(printed, " "), strings.Join(c.SCSNotes, "; "))
		return 0
	}
	t.Logf("%s: cpu %d: SCS copy = the kernel's printed copy, %d entries from %s (%s)", s.Name, s.StoppedCPU, len(got), printed[p], strings.Join(c.SCSNotes, "; "))
	return len(got)
}

// checkTable checks the per-version offset table (used without BTF)
// against the real kernel's BTF.
func checkTable(t *testing.T, k *kernel.Kernel) {
	t.Helper()
	if k.BTF == nil {
		t.Fatal("no BTF")
	}
	btf, tab := k.V.Offsets(k.BTF), k.V.Offsets(nil)
	n := 0
	for key, o := range tab {
		if !strings.HasPrefix(o.Source, "table") {
			continue
		}
		n++
		if b := btf[key]; b.Source != "btf" || b.Value != o.Value {
			t.Errorf("%s: table %d, BTF %d (%s)", key, o.Value, b.Value, b.Source)
		}
	}
	if n == 0 {
		t.Errorf("kernel %s: no table for its version", k.V.Info.OSRelease)
	}
	t.Logf("%d table offsets equal the BTF's (pt_regs.stackframe %d, sizeof(pt_regs) %d)", n, btf["pt_regs.stackframe"].Value, btf["sizeof(pt_regs)"].Value)
}

// TestFallbacksAgreeWithDataSymbols checks, on Debian's 6.1 (whose
// kallsyms has no data symbols), that what the unwinder derives without
// them equals what vmlinux's symbols give: the BTF found by its header
// after _etext is __start_BTF..__stop_BTF, the IRQ stack inferred as the
// THREAD_SIZE-aligned block holding sp is per_cpu(irq_stack_ptr), and the
// walk from gdb's SP_EL0 as current is the same.
func TestFallbacksAgreeWithDataSymbols(t *testing.T) {
	cp, err := kcapture.OpenCapture("../../testdata/kernel/deb-6.1")
	if err != nil {
		t.Fatal(err)
	}
	var text []vmcore.KSym
	var start, stop uint64
	for _, s := range cp.Syms {
		switch {
		case s.Name == "__start_BTF":
			start = s.Addr
		case s.Name == "__stop_BTF":
			stop = s.Addr
		}
		if s.Type == 't' || s.Type == 'T' || s.Type == 'w' || s.Type == 'W' || s.Name == "_etext" {
			text = append(text, s)
		}
	}
	vmcore.SortSizes(text)
	s0 := &cp.Expected.Stops[0]
	v, err := cp.Vmcore(s0.Name)
	if err != nil {
		t.Fatal(err)
	}
	k0, err := kernel.New(v, text, kernel.Options{Current: s0.SPEL0()})
	if err != nil {
		t.Fatal(err)
	}
	if k0.BTF == nil || k0.BTFAt != start || k0.BTFAt+k0.BTFSize != stop || start == 0 {
		t.Fatalf("BTF found at [%#x, +%d), __start_BTF..__stop_BTF [%#x, %#x): %v", k0.BTFAt, k0.BTFSize, start, stop, k0.Notes)
	}
	s1 := &cp.Expected.Stops[1] // l-ipi: CPU0 on its IRQ stack
	exact, err := cp.Kernel(s1)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := cp.Vmcore(s1.Name)
	if err != nil {
		t.Fatal(err)
	}
	k1, err := kernel.New(v1, text, kernel.Options{Current: s1.SPEL0(), BTF: k0.BTF, BTFFrom: s0.Name})
	if err != nil {
		t.Fatal(err)
	}
	we, err1 := exact.CPUWalk(s1.StoppedCPU)
	wi, err2 := k1.CPUWalk(s1.StoppedCPU)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if len(wi.Stacks) != 2 || wi.Stacks[1].Low != we.Stacks[1].Low || wi.Stacks[1].Kind != we.Stacks[1].Kind || !strings.HasPrefix(wi.Stacks[1].How, "inferred") {
		t.Fatalf("inferred %s; from symbols %s", stacksString(wi), stacksString(we))
	}
	fe, _, erre := we.Run()
	fi, _, erri := wi.Run()
	if erre != nil || erri != nil || fmt.Sprint(kcapture.Strings(exact, fe)) != fmt.Sprint(kcapture.Strings(k1, fi)) {
		t.Fatalf("walks differ: %v %v\n%v\n%v", erre, erri, kcapture.Strings(exact, fe), kcapture.Strings(k1, fi))
	}
}

// stacksString lists a walk's stacks and where their bounds came from.
func stacksString(w *kernel.Walk) string {
	var b strings.Builder
	for _, s := range w.Stacks {
		fmt.Fprintf(&b, "%s [%#x, %#x) %s; ", s.Kind, s.Low, s.High, s.How)
	}
	return strings.TrimSuffix(b.String(), "; ")
}
