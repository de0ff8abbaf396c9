package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// isKernelCapture reports whether path is a directory holding a kernel
// capture (testdata/kernel/NAME: expected.json and trimmed vmcores), the
// format of this repository's fixtures (internal/kcapture).
func isKernelCapture(path string) bool {
	st, err := os.Stat(filepath.Join(path, "expected.json"))
	return err == nil && st.Mode().IsRegular()
}

// dumpKernel prints every stop of a kernel capture: the stopped CPU's FP
// walk and SCS copy side by side, beside the trace the kernel printed,
// and at the sysrq-t stop every task's walk against its printed trace.
func dumpKernel(w io.Writer, dir string) error {
	cp, err := kcapture.OpenCapture(dir)
	if err != nil {
		return err
	}
	for i := range cp.Expected.Stops {
		s := &cp.Expected.Stops[i]
		k, err := cp.Kernel(s)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "== %s: stop %s (breakpoint on %s), cpu %d\n", filepath.Base(dir), s.Name, s.Func, s.StoppedCPU)
		for _, n := range k.Notes {
			fmt.Fprintf(w, "   %s\n", n)
		}
		if s.StoppedCPU < 0 || s.StoppedCPU >= len(k.V.CPUs) {
			return fmt.Errorf("%s: expected.json: stop %d (%s): stopped_cpu %d is not among the dump's %d CPU(s)",
				dir, i, s.Name, s.StoppedCPU, len(k.V.CPUs))
		}
		rep := k.Unwind(s.Name == "t")
		c := rep.CPUs[s.StoppedCPU]
		if c.Walk != nil {
			fmt.Fprintf(w, "   stacks: %s\n", stacksString(c.Walk))
		}
		scsF, scsErr := c.SCS, c.SCSErr
		for _, n := range c.SCSNotes {
			fmt.Fprintf(w, "   scs: %s\n", n)
		}
		var printed []string
		if s.Trace >= 0 {
			printed = cp.Expected.Traces[s.Trace].Frames
		}
		if err := sideBySide(w, k, scsF, c.Frames, scsErr, c.Err, printed); err != nil {
			return err
		}
		if s.Name == "t" {
			tasks(w, cp, k, rep)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// sideBySide prints the SCS copy and the FP walk lined up, each difference
// explained, with the kernel's printed trace aligned to the FP walk.
func sideBySide(w io.Writer, k *kernel.Kernel, scsF, fpF []unwind.Frame, scsErr, fpErr error, printed []string) error {
	cmp := k.Compare(scsF, fpF, scsErr, fpErr)
	noSCS := errors.Is(scsErr, kernel.ErrNotSupported)
	// The call chain: the FP walk's frames plus those only the SCS holds
	// because the stopped function's prologue pushed x30 there but had
	// not linked its frame record yet.
	var chain []string
	scsOnly := 0
	for _, r := range cmp.Rows {
		switch {
		case r.InFP:
			chain = append(chain, cmp.Name(r.FP.PC))
		case strings.HasPrefix(r.Note, kernel.NoteSCSOnlyPushedUnlinked):
			chain = append(chain, cmp.Name(r.SCS.PC))
			scsOnly++
		}
	}
	at, merr := 0, error(nil)
	p := kcapture.PrintedFrom(printed)
	later := false // the stopped function printed at a later offset
	if len(printed) > 0 {
		at, merr = kcapture.MatchPrinted(chain, printed)
		// A CPU stopped inside a function (past its first instruction)
		// prints that function at the offset of its later call.
		if merr != nil && len(chain) > 1 && len(fpF) > 0 && !atFuncStart(k, fpF[0].PC) && p+1 < len(printed) && kcapture.FuncOf(chain[0]) == kcapture.FuncOf(printed[p]) {
			if a, err := kcapture.MatchPrinted(chain[1:], printed[p+1:]); err == nil && a == 0 {
				at, merr, later = 0, nil, true
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSCS copy\tFP walk [origin, stack]\tkernel printed\twhy SCS and FP differ")
	j, c := 0, 0
	for i, r := range cmp.Rows {
		sc, fw, pr := "-", "-", ""
		if r.InSCS {
			sc = cmp.Name(r.SCS.PC)
		}
		if r.InFP {
			f := fpF[j]
			fw = fmt.Sprintf("%s [%s, %s]", k.Format(f.PC), f.Origin, f.Stack)
			j++
		}
		if r.InFP || strings.HasPrefix(r.Note, kernel.NoteSCSOnlyPushedUnlinked) {
			if q := c - at + p; len(printed) > 0 && q >= p && q < len(printed) {
				pr = printed[q]
				if pr == chain[c] {
					pr = "= " + pr
				}
			}
			c++
		}
		note := r.Note
		if noSCS {
			note = "" // nothing to explain: the kernel has no SCS
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i, sc, fw, pr, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if scsErr != nil {
		fmt.Fprintf(w, "SCS copy: %v\n", scsErr)
	}
	if fpErr != nil {
		fmt.Fprintf(w, "FP walk ended with: %v\n", fpErr)
	}
	if len(printed) > 0 {
		if merr != nil {
			fmt.Fprintf(w, "printed trace: DIFFERS: %v\n", merr)
		} else if later {
			plus := ""
			if scsOnly > 0 {
				plus = fmt.Sprintf(" plus the %d frame(s) only the SCS holds", scsOnly)
			}
			fmt.Fprintf(w, "printed trace: its %d frames from %s (after %d of printing code) match the FP walk%s (the stopped function prints at the offset of its later call)\n", len(printed)-p, printed[p], p, plus)
		} else {
			fmt.Fprintf(w, "printed trace: its %d frames from %s (after %d of printing code) match the FP walk exactly\n", len(printed)-p, printed[p], p)
		}
	}
	return nil
}

// tasks prints each task's walk from cpu_context against its printed trace.
func tasks(w io.Writer, cp *kcapture.Capture, k *kernel.Kernel, rep *kernel.Report) {
	byPID := map[int]*kcapture.Trace{}
	for i := range cp.Expected.Traces {
		if t := &cp.Expected.Traces[i]; t.Scenario == "t" && t.PID >= 0 {
			byPID[t.PID] = t
		}
	}
	same, blocked := 0, 0
	fmt.Fprintf(w, "tasks (sysrq-t), each from its cpu_context:\n")
	for _, t := range rep.Tasks {
		pt := byPID[t.Task.PID]
		ws := kcapture.Strings(k, t.Frames)
		verdict := "not printed"
		if pt != nil {
			verdict = "state " + pt.State + ": "
			eq := fmt.Sprint(ws) == fmt.Sprint(pt.Frames) && t.Err == nil
			switch {
			case eq:
				verdict += "= printed"
			case pt.State == "R":
				verdict += "running or runnable: cpu_context changes, not compared"
			default:
				verdict += "DIFFERS from the printed trace"
			}
			if pt.State != "R" {
				blocked++
				if eq {
					same++
				}
			}
		}
		scs := ""
		if t.SCSErr == nil {
			scs = fmt.Sprintf(", SCS copy %d", len(t.SCS))
		}
		last := ""
		if len(ws) > 0 {
			last = ws[len(ws)-1]
		}
		fmt.Fprintf(w, "  pid %-4d %-16s FP %2d frames%s, ends %-28s %s\n", t.Task.PID, t.Task.Comm, len(ws), scs, last, verdict)
	}
	fmt.Fprintf(w, "blocked tasks: %d of %d match their printed trace exactly\n", same, blocked)
}

// atFuncStart reports whether pc is the first instruction of its function.
func atFuncStart(k *kernel.Kernel, pc uint64) bool {
	s, ok := k.Sym(pc)
	return ok && s.Addr == pc
}
