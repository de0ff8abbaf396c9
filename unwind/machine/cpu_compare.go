package machine

import (
	"fmt"
	"github.com/unwindkit/unwindkit/fp"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/unwindkit/unwindkit/unwind"
)

// TruthRow is one line of a TruthComparison: a frame of the CPU's ground
// truth and what each unwinder reported for it.
type TruthRow struct {
	// Truth is the ground-truth frame.
	Truth TruthFrame
	// Row is what each technique reported for Truth, and why they differ.
	unwind.Row
}

// TruthComparison lines up an SCS trace and an FP trace against the CPU's
// ground truth and explains every difference by the rule that causes it.
type TruthComparison struct {
	// Rows are the ground truth's frames, innermost first.
	Rows []TruthRow
	// SCSErr and FPErr are the errors each walk ended with.
	SCSErr, FPErr error
	sym           *unwind.Symbolizer
}

// Compare unwinds the CPU with both techniques (inline in the current
// function) and lines the results up against the ground truth, explaining
// each difference by the rule that causes it. The first opts.Skip frames
// of each technique are marked as removed by Skip.
func (c *CPU) Compare(opts SaveOptions) (*TruthComparison, error) {
	cmp := &TruthComparison{sym: c.m.sym}
	var scsF, fpF []unwind.Frame
	// Unwind without skip, so each frame Skip removes can be lined up
	// with its truth entry and said to be skipped.
	all := opts
	all.Skip = 0
	if c.m.cfg.SCS {
		src, err := c.Source(unwind.MethodSCS, all)
		if err != nil {
			return nil, err
		}
		scsF, cmp.SCSErr = src.AppendFrames(nil)
	}
	if c.m.cfg.FramePointers {
		src, err := c.Source(unwind.MethodFP, all)
		if err != nil {
			return nil, err
		}
		fpF, cmp.FPErr = src.AppendFrames(nil)
	}
	es := c.truth()
	if len(es) == 0 {
		return cmp, nil
	}
	scsWhyOf := map[int]string{}
	fpWhyOf := map[int]string{}
	for _, ms := range []struct {
		method unwind.Method
		dst    map[int]string
	}{{unwind.MethodSCS, scsWhyOf}, {unwind.MethodFP, fpWhyOf}} {
		for _, mi := range expectOf(c.m, c.ctxs, es, ms.method, false, opts).Missing {
			ms.dst[mi.Index] = mi.Why
		}
	}
	usedS := make([]bool, len(scsF))
	usedF := make([]bool, len(fpF))
	// take finds the first unused frame of fs with one of pcs; it is
	// not taken if Skip removes it (its index is below opts.Skip).
	take := func(fs []unwind.Frame, used []bool, pcs ...uint64) (f unwind.Frame, ok, skipped bool) {
		for i, f := range fs {
			if used[i] {
				continue
			}
			for _, pc := range pcs {
				if f.PC == pc {
					used[i] = true
					if i < opts.Skip {
						return unwind.Frame{}, false, true
					}
					return f, true, false
				}
			}
		}
		return unwind.Frame{}, false, false
	}
	for k, e := range es {
		r := TruthRow{Truth: e.TruthFrame}
		if k == 0 {
			r.Note = "the running function's pc is in a register; unwinders start at its caller"
			cmp.Rows = append(cmp.Rows, r)
			continue
		}
		var skipS, skipF bool
		r.SCS, r.InSCS, skipS = take(scsF, usedS, e.SCSValue, e.PC)
		r.FP, r.InFP, skipF = take(fpF, usedF, e.PC)
		var notes []string
		switch {
		case skipS:
			notes = append(notes, "SCS: removed by Skip")
		case !r.InSCS && c.m.cfg.SCS:
			notes = append(notes, "SCS: "+scsWhyOf[k])
		}
		switch {
		case skipF:
			notes = append(notes, "FP: removed by Skip")
		case !r.InFP && c.m.cfg.FramePointers:
			notes = append(notes, "FP: "+fpWhyOf[k])
		}
		if r.InSCS && r.SCS.PC != e.PC {
			notes = append(notes, fmt.Sprintf("SCS holds the %s trampoline; the copy does not recover it (FP does, from the task's return stack)", c.m.sym.Func(r.SCS.PC)))
		}
		if r.InSCS && r.SCS.Origin == fp.OriginInterruptedPC {
			notes = append(notes, "SCS: interrupted pc from the per-CPU copy (KeepInterruptedPC), reported at the context boundary")
		}
		if r.InFP && r.FP.Origin == fp.OriginRegsPC {
			notes = append(notes, "FP: exception boundary, pc from pt_regs")
		}
		r.Note = strings.Join(notes, "; ")
		cmp.Rows = append(cmp.Rows, r)
	}
	return cmp, nil
}

// Format writes the comparison as a table: ground truth, context, where
// the pc is saved, each technique's frame, and why they differ.
func (cmp *TruthComparison) Format(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tground truth\tcontext\tsaved by\tSCS copy\tFP walk\twhy they differ")
	for i, r := range cmp.Rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", i, cmp.sym.Name(r.Truth.PC), r.Truth.Context, r.Truth.SavedBy,
			cmp.truthCell(r.SCS, r.InSCS), cmp.truthCell(r.FP, r.InFP), r.Note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if cmp.SCSErr != nil {
		fmt.Fprintf(w, "SCS copy ended with: %v\n", cmp.SCSErr)
	}
	if cmp.FPErr != nil {
		fmt.Fprintf(w, "FP walk ended with: %v\n", cmp.FPErr)
	}
	return nil
}

func (cmp *TruthComparison) truthCell(f unwind.Frame, ok bool) string {
	if !ok {
		return "-"
	}
	if cmp.sym == nil {
		return f.String()
	}
	return fmt.Sprintf("%s [%s]", cmp.sym.Name(f.PC), f.Origin)
}

// String returns the formatted table.
func (cmp *TruthComparison) String() string {
	var b strings.Builder
	cmp.Format(&b)
	return b.String()
}
