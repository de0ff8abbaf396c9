// Command unwinddump unwinds arm64 stacks from what a crash leaves: a
// kernel vmcore, an ELF user core, a snapshot (unwind/snapshot) or a
// kernel capture directory (testdata/kernel/NAME), with both techniques
// (the shadow call stack copy and the frame-pointer walk), and explains
// every difference; a user core's or a snapshot's Guarded Control Stack
// is copied with -method gcs. The input's kind is read from its content.
//
//	unwinddump [-tasks] [-cpu N | -pid N | -task ADDR] [-method scs|fp|both] [-json] VMCORE [System.map|kallsyms|vmlinux...]
//	unwinddump [-pid N] [-method scs|fp|both|gcs] [-json] CORE EXE [LIB...]
//	unwinddump [-method scs|fp|both|gcs] [-json] SNAPSHOT.json
//	unwinddump testdata/kernel/deb-6.12
//
// A vmcore is unwound CPU by CPU from its registers (and with -tasks
// every task of the task list) as the kernel prints frames
// (func+0xoff/0xsize), with the symbols of the dump's kallsyms and of the
// files given, merged; file:line and inlined frames come from the DWARF
// of a vmlinux, executable or library given. -json prints one document
// whose schema the README's crash-dump section documents. A capture
// directory is unwound stop by stop beside the kernel's own printed Call
// trace: that mode is for this repository's fixtures (testdata/kernel,
// read with the module's internal/kcapture), not a format of crash dumps. -h lists the flags; the exit status is 0 on success, 2 for a
// usage error, 1 for a failure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/snapshot"
)

const usageText = `usage: unwinddump [flags] INPUT [FILE...]

INPUT is recognised by its content (gzip-compressed files are inflated):
  an ELF core with a VMCOREINFO note   a kernel vmcore; FILEs are symbol sources:
                                       System.map, /proc/kallsyms text, vmlinux
  any other ELF core                   a user core; FILEs are its executable and libraries
  a JSON document                      a snapshot (unwind/snapshot)
  a directory with expected.json       a kernel capture of this repository (testdata/kernel/NAME)

flags:
`

// options are the command's flags.
type options struct {
	tasks  bool
	cpu    int
	pid    int
	task   uint64
	method string
	json   bool
	info   bool
	btf    string
	// lines is the DWARF of the files given (set while dumping).
	lines lines
}

// errUsage marks an error of the command line (exit status 2).
var errUsage = errors.New("usage")

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain runs the command with args, writing to stdout and stderr, and
// returns its exit status: 0 on success (and for -h), 2 for a usage
// error, 1 for a failure.
func realMain(args []string, stdout, stderr io.Writer) int {
	o, files, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if err := dispatch(stdout, stderr, o, files); err != nil {
		fmt.Fprintln(stderr, "unwinddump:", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

// run dumps what args name (the command's arguments, flags included) to
// w, warnings discarded.
func run(w io.Writer, args []string) error {
	o, files, err := parseArgs(args, io.Discard)
	if err != nil {
		return err
	}
	return dispatch(w, io.Discard, o, files)
}

// parseArgs parses the flags of args; usage and flag errors go to stderr.
func parseArgs(args []string, stderr io.Writer) (*options, []string, error) {
	o := &options{}
	fs := flag.NewFlagSet("unwinddump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	var task string
	fs.BoolVar(&o.tasks, "tasks", false, "vmcore: also walk every task of the task list (like crash's foreach bt)")
	fs.IntVar(&o.cpu, "cpu", -1, "vmcore: walk only this CPU")
	fs.IntVar(&o.pid, "pid", -1, "vmcore: walk only the task of this pid (user core: the thread)")
	fs.StringVar(&task, "task", "", "vmcore: walk only the task_struct at this address (hex)")
	fs.StringVar(&o.method, "method", "both", "technique: scs (shadow call stack copy), fp (frame records), both, or gcs (a user core's or snapshot's Guarded Control Stack copy)")
	fs.BoolVar(&o.json, "json", false, "print one JSON document (schema in the README)")
	fs.BoolVar(&o.info, "info", false, "vmcore: describe the dump (VMCOREINFO, symbols, offsets, registers) instead of unwinding")
	fs.StringVar(&o.btf, "btf", "", "vmcore: take the BTF from this file (a vmcore of the same build, a vmlinux or raw BTF)")
	// Flags may come before, between or after the files (up to "--").
	var files []string
	for {
		if len(args) > 0 && args[0] == "--" {
			files = append(files, args[1:]...)
			break
		}
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		rest := fs.Args()
		if len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			files = append(files, rest...)
			break
		}
		files = append(files, rest[0])
		args = rest[1:]
	}
	bad := func(format string, a ...any) (*options, []string, error) {
		fmt.Fprintf(stderr, "unwinddump: "+format+"\n", a...)
		fs.Usage()
		return nil, nil, fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	switch o.method {
	case "scs", "fp", "both", "gcs":
	default:
		return bad("-method %q: want scs, fp, both or gcs", o.method)
	}
	if task != "" {
		v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(task), "0x"), 16, 64)
		if err != nil || v == 0 {
			return bad("-task %q: want a task_struct address in hex", task)
		}
		o.task = v
	}
	sel := 0
	for _, on := range []bool{o.cpu >= 0, o.pid >= 0, o.task != 0} {
		if on {
			sel++
		}
	}
	if sel > 1 {
		return bad("-cpu, -pid and -task select one stack: give one of them")
	}
	if o.cpu < -1 || o.pid < -1 {
		return bad("-cpu and -pid take a number from 0")
	}
	if len(files) == 0 {
		return bad("no input")
	}
	return o, files, nil
}

// methods returns which of the two compared techniques -method selects
// (neither for gcs).
func (o *options) methods() (scs, fp bool) {
	both := o.method == "both"
	return both || o.method == "scs", both || o.method == "fp"
}

// gcs reports whether -method selects the GCS copy.
func (o *options) gcs() bool { return o.method == "gcs" }

// printGCS prints a GCS copy as a list, then the error it ended with.
func printGCS(w io.Writer, sym *unwind.Symbolizer, fs []unwind.Frame, err error) error {
	fmt.Fprintf(w, "GCS copy: %d frames\n", len(fs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, f := range fs {
		fmt.Fprintf(tw, "#%d\t%#x\t%s\t[%s, slot %#x]\n", i, f.Raw, sym.Name(f.PC), f.Origin, f.Addr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err != nil {
		fmt.Fprintf(w, "gcs ended with: %v\n", err)
	}
	return nil
}

// sourceFrames collects the frames of a Source and the error it ended
// with.
func sourceFrames(src *unwind.Source, err error) ([]unwind.Frame, error) {
	if err != nil {
		return nil, err
	}
	return src.AppendFrames(nil)
}

// dispatch recognises the first file by its content and dumps it.
func dispatch(w, stderr io.Writer, o *options, files []string) error {
	k, err := sniff(files[0])
	if err != nil {
		return err
	}
	rest := files[1:]
	kernelOnly := o.tasks || o.cpu >= 0 || o.task != 0 || o.info || o.btf != ""
	switch k {
	case kindCapture:
		if len(rest) > 0 || kernelOnly || o.pid >= 0 || o.json || o.method != "both" {
			return fmt.Errorf("%w: %s is a kernel capture directory: it takes no other file and no flag", errUsage, files[0])
		}
		return dumpKernel(w, files[0])
	case kindSnapshot:
		if len(rest) > 0 || kernelOnly || o.pid >= 0 {
			return fmt.Errorf("%w: %s is a snapshot: it takes no other file, and only -json and -method", errUsage, files[0])
		}
		return dumpSnapshot(w, files[0], o)
	case kindCore:
		return dumpELFCore(w, stderr, files[0], rest, o)
	}
	return fmt.Errorf("%s: %s: not a vmcore, a user core, a snapshot or a capture directory", files[0], k)
}

// dump prints a snapshot's two traces side by side.
func dump(w io.Writer, path string) error {
	return dumpSnapshot(w, path, &options{method: "both"})
}

func dumpSnapshot(w io.Writer, path string, o *options) error {
	s, err := snapshot.Open(path)
	if err != nil {
		return err
	}
	if o.json {
		return snapshotJSON(w, path, s, o)
	}
	sym := s.Symbolizer()
	fmt.Fprintf(w, "snapshot %s: va_bits %d, tbi %v\n", path, s.VABits, s.TBI)
	fmt.Fprintf(w, "regs: pc %s, sp %#x, x18 %#x, x29 %#x, x30 %#x (%s)\n", sym.Name(s.Layout.Strip(s.Regs.PC)),
		s.Regs.SP, s.Regs.X18, s.Regs.X29, s.Regs.X30, sym.Name(s.Layout.Strip(s.Regs.X30)))
	for _, r := range s.Regions() {
		fmt.Fprintf(w, "region %-10s %-6s [%#x, %#x)\n", r.Name, r.Kind, r.Base, r.Base+r.Size)
	}
	if o.gcs() {
		fmt.Fprintf(w, "GCSPR_EL0 %#x\n\n", s.Regs.GCSPR)
		fs, err := sourceFrames(s.Source(unwind.MethodGCS))
		return printGCS(w, sym, fs, err)
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
	if err := printMethod(w, sym, cmp, o); err != nil {
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

// splitRows returns the SCS copy's and the FP walk's frames of a
// comparison.
func splitRows(cmp *unwind.Comparison) (scsF, fpF []unwind.Frame) {
	for _, r := range cmp.Rows {
		if r.InSCS {
			scsF = append(scsF, r.SCS)
		}
		if r.InFP {
			fpF = append(fpF, r.FP)
		}
	}
	return scsF, fpF
}

// printMethod prints the techniques -method selects: both side by side
// (printRows), or one as a list.
func printMethod(w io.Writer, sym *unwind.Symbolizer, cmp *unwind.Comparison, o *options) error {
	useSCS, useFP := o.methods()
	if useSCS && useFP {
		return printRows(w, sym, cmp)
	}
	scsF, fpF := splitRows(cmp)
	list, what := fpF, "FP walk"
	if useSCS {
		list, what = scsF, "SCS copy"
	}
	fmt.Fprintf(w, "%s: %d frames\n", what, len(list))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, f := range list {
		fmt.Fprintf(tw, "#%d\t%#x\t%s\t[%s]\n", i, f.Raw, sym.Name(f.PC), f.Origin)
	}
	return tw.Flush()
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
