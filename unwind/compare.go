package unwind

import (
	"fmt"
	"github.com/unwindkit/unwindkit/fp"
	"io"
	"strings"
	"text/tabwriter"
)

// Row is one line of a Comparison: what each unwinder reported for one
// frame.
type Row struct {
	// SCS and FP are the frames the unwinders reported for this row;
	// InSCS and InFP say whether each reported one.
	SCS, FP     Frame
	InSCS, InFP bool
	// Note says why the row differs between the techniques.
	Note string
}

// Comparison lines up an SCS trace and an FP trace and explains every
// difference.
type Comparison struct {
	// Rows are the lined-up frames, innermost first.
	Rows []Row
	// SCSErr and FPErr are the errors each walk ended with.
	SCSErr, FPErr error
	namer         Namer
}

// Namer names a pc: *[Symbolizer] is one; a crash-dump reader may name
// pcs its own way (the kernel's %pS).
type Namer interface {
	Name(pc uint64) string
}

// CompareTraces lines up an SCS trace and an FP trace that have no ground
// truth (a snapshot of a real program) by longest common subsequence of
// their PCs, and explains each frame only one of them has. names names
// the frames the table shows (nil, or a nil *Symbolizer: hex).
func CompareTraces(names Namer, scsF, fpF []Frame) *Comparison {
	if s, ok := names.(*Symbolizer); ok && s == nil {
		names = nil
	}
	cmp := &Comparison{namer: names}
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
			case fpF[j].Origin == fp.OriginRegsPC:
				r.Note = "only FP: exception boundary (pt_regs pc): the interrupted function's pc was never pushed on the SCS"
			case j == 0 && fpF[j].Origin == fp.OriginCaller:
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
	fmt.Fprintln(tw, "#\tSCS copy\tFP walk\twhy they differ")
	for i, r := range cmp.Rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", i, cmp.cell(r.SCS, r.InSCS), cmp.cell(r.FP, r.InFP), r.Note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	formatErrs(w, cmp.SCSErr, cmp.FPErr)
	return nil
}

// cell is a frame as a comparison table shows it, "-" when the technique
// did not report it.
func (cmp *Comparison) cell(f Frame, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%s [%s]", cmp.Name(f.PC), f.Origin)
}

// Name names pc as the table does: with the Namer CompareTraces was
// given, or in hex.
func (cmp *Comparison) Name(pc uint64) string {
	if cmp.namer == nil {
		return fmt.Sprintf("%#x", pc)
	}
	return cmp.namer.Name(pc)
}

func formatErrs(w io.Writer, scsErr, fpErr error) {
	if scsErr != nil {
		fmt.Fprintf(w, "SCS copy ended with: %v\n", scsErr)
	}
	if fpErr != nil {
		fmt.Fprintf(w, "FP walk ended with: %v\n", fpErr)
	}
}

// String returns the formatted table.
func (cmp *Comparison) String() string {
	var b strings.Builder
	cmp.Format(&b)
	return b.String()
}
