package unwind

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Row is one line of a Comparison: a frame of the ground truth (when there
// is one) and what each unwinder reported for it.
type Row struct {
	// Truth is the ground-truth frame; zero for comparisons without one.
	Truth   TruthFrame
	HasTrue bool
	// SCS and FP are the frames the unwinders reported for this row.
	SCS, FP     Frame
	InSCS, InFP bool
	Note        string // why the row differs between the techniques
}

// Comparison lines up an SCS trace and an FP trace, optionally against a
// ground truth, and explains every difference.
type Comparison struct {
	Rows          []Row
	SCSErr, FPErr error
	sym           *Symbolizer
}

// Compare unwinds the CPU with both techniques (inline in the current
// function) and lines the results up against the ground truth, explaining
// each difference by the rule that causes it.
func (c *CPU) Compare(opts SaveOptions) (*Comparison, error) {
	cmp := &Comparison{sym: c.m.sym}
	var scsF, fpF []Frame
	if c.m.cfg.SCS {
		src, err := c.Source(MethodSCS, opts)
		if err != nil {
			return nil, err
		}
		scsF, cmp.SCSErr = collect(src)
	}
	if c.m.cfg.FramePointers {
		src, err := c.Source(MethodFP, opts)
		if err != nil {
			return nil, err
		}
		fpF, cmp.FPErr = collect(src)
	}
	es := c.truth()
	if len(es) == 0 {
		return cmp, nil
	}
	scsWhyOf := map[int]string{}
	fpWhyOf := map[int]string{}
	for _, ms := range []struct {
		method Method
		dst    map[int]string
	}{{MethodSCS, scsWhyOf}, {MethodFP, fpWhyOf}} {
		for _, mi := range expectOf(c.m, c.ctxs, es, ms.method, false, opts).Missing {
			ms.dst[mi.Index] = mi.Why
		}
	}
	usedS := make([]bool, len(scsF))
	usedF := make([]bool, len(fpF))
	take := func(fs []Frame, used []bool, pcs ...uint64) (Frame, bool) {
		for i, f := range fs {
			if used[i] {
				continue
			}
			for _, pc := range pcs {
				if f.PC == pc {
					used[i] = true
					return f, true
				}
			}
		}
		return Frame{}, false
	}
	for k, e := range es {
		r := Row{Truth: e.TruthFrame, HasTrue: true}
		if k == 0 {
			r.Note = "the running function's pc is in a register; unwinders start at its caller"
			cmp.Rows = append(cmp.Rows, r)
			continue
		}
		r.SCS, r.InSCS = take(scsF, usedS, e.SCSValue, e.PC)
		r.FP, r.InFP = take(fpF, usedF, e.PC)
		var notes []string
		if !r.InSCS && c.m.cfg.SCS {
			notes = append(notes, "SCS: "+scsWhyOf[k])
		}
		if !r.InFP && c.m.cfg.FramePointers {
			notes = append(notes, "FP: "+fpWhyOf[k])
		}
		if r.InSCS && r.SCS.PC != e.PC {
			notes = append(notes, fmt.Sprintf("SCS holds the %s trampoline; the copy does not recover it (FP does, from the task's return stack)", c.m.sym.Func(r.SCS.PC)))
		}
		if r.InSCS && r.SCS.Source == SourceInterruptedPC {
			notes = append(notes, "SCS: interrupted pc from the per-CPU copy (KeepInterruptedPC), reported at the context boundary")
		}
		if r.InFP && r.FP.Source == SourceRegsPC {
			notes = append(notes, "FP: exception boundary, pc from pt_regs")
		}
		r.Note = strings.Join(notes, "; ")
		cmp.Rows = append(cmp.Rows, r)
	}
	return cmp, nil
}

func collect(src *Source) ([]Frame, error) {
	var out []Frame
	for f, err := range src.Frames() {
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
	return out, nil
}

// CompareTraces lines up an SCS trace and an FP trace that have no ground
// truth (a snapshot of a real program) by longest common subsequence of
// their PCs, and explains each frame only one of them has.
func CompareTraces(sym *Symbolizer, scsF, fpF []Frame) *Comparison {
	cmp := &Comparison{sym: sym}
	n, m := len(scsF), len(fpF)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if scsF[i].PC == fpF[j].PC {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && scsF[i].PC == fpF[j].PC:
			cmp.Rows = append(cmp.Rows, Row{SCS: scsF[i], FP: fpF[j], InSCS: true, InFP: true})
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			r := Row{FP: fpF[j], InFP: true}
			switch {
			case fpF[j].Source == SourceRegsPC:
				r.Note = "only FP: exception boundary (pt_regs pc): the interrupted function's pc was never pushed on the SCS"
			case j == 0 && fpF[j].Source == SourceCaller:
				r.Note = "only FP: the walk's start pc, the running function's own pc, which no prologue pushed"
			case j == 0:
				r.Note = "only FP: the innermost return address was still in x30 (a leaf, or captured before the push)"
			default:
				r.Note = "only FP: the function that saved it did not push on the SCS (not instrumented, asm, or a signal/exception frame)"
			}
			cmp.Rows = append(cmp.Rows, r)
			j++
		default:
			r := Row{SCS: scsF[i], InSCS: true}
			r.Note = "only SCS: no frame record holds it (frame pointer omitted, or the FP walk stopped)"
			cmp.Rows = append(cmp.Rows, r)
			i++
		}
	}
	return cmp
}

// Format writes the comparison as a side-by-side table.
func (cmp *Comparison) Format(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	name := func(f Frame, ok bool) string {
		if !ok {
			return "-"
		}
		s := f.Symbol
		if s == "" && cmp.sym != nil {
			s = cmp.sym.Name(f.PC)
		}
		return fmt.Sprintf("%s [%s]", s, f.Source)
	}
	hasTruth := len(cmp.Rows) > 0 && cmp.Rows[0].HasTrue
	if hasTruth {
		fmt.Fprintln(tw, "#\tground truth\tcontext\tsaved by\tSCS copy\tFP walk\twhy they differ")
	} else {
		fmt.Fprintln(tw, "#\tSCS copy\tFP walk\twhy they differ")
	}
	for i, r := range cmp.Rows {
		if hasTruth {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", i, cmp.sym.Name(r.Truth.PC), r.Truth.Context, r.Truth.SavedBy,
				name(r.SCS, r.InSCS), name(r.FP, r.InFP), r.Note)
		} else {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", i, name(r.SCS, r.InSCS), name(r.FP, r.InFP), r.Note)
		}
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

// String returns the formatted table.
func (cmp *Comparison) String() string {
	var b strings.Builder
	cmp.Format(&b)
	return b.String()
}
