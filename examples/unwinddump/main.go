// Command unwinddump unwinds a snapshot or an ELF core file of a real arm64
// program with both techniques and prints the two traces side by side,
// symbolized, with raw and PAC-stripped addresses, and explains every
// difference. A core file is read with its executable and, optionally, its
// shared libraries; every thread is printed. A kernel vmcore alone is
// described: VMCOREINFO, page tables, symbols, offsets and where each came
// from, each CPU's registers.
//
//	go run ./examples/unwinddump testdata/arm64/snapshots/clang-pacret-pauth-signal.json
//	go run ./examples/unwinddump CORE EXE [LIB...]
//	go run ./examples/unwinddump VMCORE
//	go run ./examples/unwinddump testdata/kernel/deb-6.12
//
// A kernel capture directory (testdata/kernel/NAME) is unwound stop by
// stop with the rules of its kernel version, beside the kernel's own
// printed Call trace.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/snapshot"
)

const usage = "usage: unwinddump SNAPSHOT.json | unwinddump CORE EXE [LIB...] | unwinddump VMCORE | unwinddump KERNEL-CAPTURE-DIR"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err := run(os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "unwinddump:", err)
		os.Exit(1)
	}
}

// run dumps what args name (the command's arguments) to w.
func run(w io.Writer, args []string) error {
	switch {
	case len(args) == 0:
		return errors.New(usage)
	case isKernelCapture(args[0]):
		return dumpKernel(w, args[0])
	case isELF(args[0]) && len(args) == 1:
		return dumpVmcore(w, args[0])
	case isELF(args[0]):
		return dumpCore(w, args[0], args[1:])
	}
	return dump(w, args[0])
}

func dump(w io.Writer, path string) error {
	s, err := snapshot.Open(path)
	if err != nil {
		return err
	}
	sym := s.Symbolizer()
	fmt.Fprintf(w, "snapshot %s: va_bits %d, tbi %v\n", path, s.VABits, s.TBI)
	fmt.Fprintf(w, "regs: pc %s, sp %#x, x18 %#x, x29 %#x, x30 %#x (%s)\n", sym.Name(s.Layout.Strip(s.Regs.PC)),
		s.Regs.SP, s.Regs.X18, s.Regs.X29, s.Regs.X30, sym.Name(s.Layout.Strip(s.Regs.X30)))
	for _, r := range s.Regions() {
		fmt.Fprintf(w, "region %-10s %-6s [%#x, %#x)\n", r.Name, r.Kind, r.Base, r.Base+r.Size)
	}
	traces := map[unwind.Method][]unwind.Frame{}
	errsOf := map[unwind.Method]error{}
	for _, m := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		src, err := s.Source(m)
		if err != nil {
			errsOf[m] = err
			continue
		}
		for fr, err := range src.Frames() {
			if err != nil {
				errsOf[m] = err
				break
			}
			traces[m] = append(traces[m], fr)
		}
	}
	fmt.Fprintf(w, "\nSCS copy: %d frames; FP walk: %d frames\n\n", len(traces[unwind.MethodSCS]), len(traces[unwind.MethodFP]))
	cmp := unwind.CompareTraces(sym, traces[unwind.MethodSCS], traces[unwind.MethodFP])
	if err := printRows(w, sym, cmp); err != nil {
		return err
	}
	for _, m := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		if err := errsOf[m]; err != nil {
			fmt.Fprintf(w, "%v ended with: %v\n", m, err)
		}
	}
	if len(s.Expect) > 0 {
		fmt.Fprintf(w, "\nknown chain: %s\n", strings.Join(s.Expect, " <- "))
		for _, m := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
			var got []string
			for _, fr := range traces[m] {
				got = append(got, sym.Func(fr.PC))
			}
			fmt.Fprintf(w, "%-3v sees %2d of %d: missing %s\n", m, len(got), len(s.Expect), missing(s.Expect, got))
		}
	}
	return nil
}

// missing lists the expected names that got lacks (as a multiset).
func missing(expect, got []string) string {
	left := map[string]int{}
	for _, g := range got {
		left[g]++
	}
	var out []string
	for _, e := range expect {
		if left[e] > 0 {
			left[e]--
			continue
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return "nothing"
	}
	return strings.Join(out, ", ")
}

// printRows prints a comparison's rows side by side: the SCS copy's and the
// FP walk's frame in each row, and why they differ.
func printRows(w io.Writer, sym *unwind.Symbolizer, cmp *unwind.Comparison) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSCS raw\tSCS\tFP raw\tFP [origin]\twhy they differ")
	cell := func(fr unwind.Frame, ok bool) (string, string) {
		if !ok {
			return "-", "-"
		}
		return fmt.Sprintf("%#x", fr.Raw), sym.Name(fr.PC)
	}
	for i, r := range cmp.Rows {
		sr, sn := cell(r.SCS, r.InSCS)
		fr, fn := cell(r.FP, r.InFP)
		if r.InFP {
			fn += " [" + r.FP.Origin.String() + "]"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", i, sr, sn, fr, fn, r.Note)
	}
	return tw.Flush()
}
