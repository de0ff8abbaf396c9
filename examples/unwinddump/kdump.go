package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// kstack is one walked kernel stack: a CPU from its registers or a task
// from its cpu_context (or, running, from its CPU's registers).
type kstack struct {
	kind    string // "cpu" or "task"
	cpu     int    // the CPU, -1 for a task not running on one
	task    *kernel.Task
	taskHow string // how the CPU's current task was found
	res     kernel.Result
	scs     []unwind.Frame
	scsErr  error
	notes   []string
	errs    []string
}

// dumpKernelCore unwinds a vmcore: every CPU from its registers and, with
// -tasks, every task, or the one stack -cpu, -pid or -task selects.
func dumpKernelCore(w, stderr io.Writer, path string, v *vmcore.Vmcore, files []string, o *options) error {
	if o.info {
		if len(files) > 0 {
			return fmt.Errorf("%w: -info describes the dump alone: no symbol files", errUsage)
		}
		return describeVmcore(w, path, v)
	}
	syms, srcs, symNotes, err := kernelSymbols(v, files, stderr, &o.lines)
	defer func() {
		o.lines.close()
		for _, s := range srcs {
			if s.in != nil {
				s.in.close()
			}
		}
	}()
	if err != nil {
		return err
	}
	opts := kernel.Options{}
	if o.btf != "" {
		t, build, err := loadBTF(o.btf, syms)
		if err != nil {
			return err
		}
		opts.BTF, opts.BTFFrom, opts.BTFBuild = t, o.btf, build
	}
	k, err := kernel.New(v, syms, opts)
	if err != nil {
		return err
	}
	if k.BTF == nil && opts.BTF == nil {
		for _, s := range srcs {
			if s.btf != nil {
				opts.BTF, opts.BTFFrom = s.btf, s.name+" (.BTF)"
				if k, err = kernel.New(v, syms, opts); err != nil {
					return err
				}
				break
			}
		}
	}
	if k.BTF == nil && len(o.lines.files) > 0 {
		// No BTF anywhere: the structure offsets from a vmlinux's DWARF.
		d := o.lines.files[0]
		opts.Types = d.f.Types()
		if k, err = kernel.New(v, syms, opts); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "unwinddump: %s: no BTF: structure offsets from the DWARF of %s\n", path, d.name)
	}
	if k.BTF == nil && k.Types == nil {
		fmt.Fprintf(stderr, "unwinddump: warning: %s: no BTF (the dump holds none; give -btf, or a vmlinux with .BTF or DWARF): offsets from the version's table, tasks unknown\n", path)
	}
	wantTasks := o.tasks || o.pid >= 0 || o.task != 0
	rep := k.Unwind(wantTasks)
	var all []kstack
	byAddr := map[uint64]*kernel.Task{}
	tasks, _ := k.Tasks(0)
	for i := range tasks {
		byAddr[tasks[i].Addr] = &tasks[i]
	}
	for i := range rep.CPUs {
		c := &rep.CPUs[i]
		s := kstack{kind: "cpu", cpu: c.CPU, res: c.Result, scs: c.SCS, scsErr: c.SCSErr}
		if c.Walk == nil && c.Err != nil {
			// The kernel's own bounds are unknown: the least the dump
			// offers, every guess stated.
			s.res, _ = guessCPUWalk(k, c.CPU, c.Err)
		}
		if a, how, err := k.Current(c.CPU); err == nil {
			s.taskHow = how
			if t := byAddr[a]; t != nil {
				s.task = t
			} else {
				s.task = &kernel.Task{Addr: a, PID: -1}
			}
		} else if c.Err == nil || c.Err.Error() != err.Error() {
			s.notes = append(s.notes, err.Error())
		}
		s.notes = append(s.notes, c.SCSNotes...)
		all = append(all, s)
	}
	for i := range rep.Tasks {
		t := &rep.Tasks[i]
		s := kstack{kind: "task", cpu: -1, task: &t.Task, res: t.Result, scs: t.SCS, scsErr: t.SCSErr}
		if t.Running && !v.Virtual {
			s.cpu = k.RunningOn(t.Task.Addr)
		}
		if i < len(rep.Live) {
			lr := &rep.Live[i]
			if !lr.Consistent {
				s.notes = append(s.notes, fmt.Sprintf("live: not read consistently in %d attempt(s): %s", lr.Attempts, strings.Join(lr.Why, "; ")))
			} else if lr.Attempts > 1 {
				s.notes = append(s.notes, fmt.Sprintf("live: consistent at attempt %d (%s)", lr.Attempts, strings.Join(lr.Why, "; ")))
			}
		}
		all = append(all, s)
	}
	if wantTasks && rep.TasksErr != nil {
		fmt.Fprintf(stderr, "unwinddump: warning: task list: %v\n", rep.TasksErr)
	}
	// Selection.
	var sel []kstack
	for _, s := range all {
		switch {
		case o.cpu >= 0:
			if s.kind == "cpu" && s.cpu == o.cpu {
				sel = append(sel, s)
			}
		case o.pid >= 0:
			if s.kind == "task" && s.task.PID == o.pid {
				sel = append(sel, s)
			}
		case o.task != 0:
			if s.kind == "task" && s.task.Addr == o.task {
				sel = append(sel, s)
			}
		case s.kind == "task" && !o.tasks:
		default:
			sel = append(sel, s)
		}
	}
	if len(sel) == 0 {
		switch {
		case o.cpu >= 0:
			return fmt.Errorf("%s: no cpu %d (the dump has %d)", path, o.cpu, len(v.CPUs))
		case o.pid >= 0:
			return fmt.Errorf("%s: no task of pid %d in the task list (%d tasks; %v)", path, o.pid, len(rep.Tasks), rep.TasksErr)
		case o.task != 0:
			return fmt.Errorf("%s: no task_struct at %#x in the task list (%d tasks; %v)", path, o.task, len(rep.Tasks), rep.TasksErr)
		}
	}
	for i := range sel {
		s := &sel[i]
		if s.res.Walk != nil {
			s.notes = append(append([]string(nil), s.res.Walk.Notes...), s.notes...)
		}
		if s.res.Err != nil {
			s.errs = append(s.errs, "fp: "+s.res.Err.Error())
		}
		if s.scsErr != nil && !errors.Is(s.scsErr, kernel.ErrNotSupported) {
			s.errs = append(s.errs, "scs: "+s.scsErr.Error())
		}
	}
	notes := symNotes
	seen := map[string]bool{}
	for _, n := range k.Notes {
		if !seen[n] {
			seen[n] = true
			notes = append(notes, n)
		}
	}
	switch err := k.SCSState(); {
	case k.BTF == nil:
		notes = append(notes, "SCS copy: whether the kernel has shadow call stacks is unknown (no BTF)")
	case err != nil:
		notes = append(notes, "SCS copy: none: "+strings.TrimPrefix(strings.TrimSuffix(err.Error(), ": "+kernel.ErrNotSupported.Error()), k.V.Path+": "))
	}
	walked := 0
	useSCS, useFP := o.methods()
	for i := range sel {
		if useFP && len(sel[i].res.Frames) > 0 || useSCS && len(sel[i].scs) > 0 {
			walked++
		}
	}
	var failed error
	if walked == 0 {
		first := "no frames"
		if len(sel) > 0 && len(sel[0].errs) > 0 {
			first = sel[0].errs[0]
		} else if useSCS && !useFP && len(sel) > 0 && sel[0].scsErr != nil {
			first = "scs: " + sel[0].scsErr.Error()
		}
		failed = fmt.Errorf("%s: no stack could be walked (%s)", path, first)
	}
	if o.json {
		if err := kernelJSON(w, path, k, notes, rep, sel, o); err != nil {
			return err
		}
		return failed
	}
	fmt.Fprintf(w, "vmcore %s: Linux %s, %d CPU(s)\n", path, v.Info.OSRelease, len(v.CPUs))
	for _, n := range notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if k.HasSCS() {
		if rep.SCSPolicyErr != nil {
			fmt.Fprintf(w, "  interrupted x18 kept: unknown (%v)\n", rep.SCSPolicyErr)
		} else {
			fmt.Fprintf(w, "  interrupted x18 kept: %s\n", rep.SCSPolicy)
		}
	}
	for i := range sel {
		fmt.Fprintln(w)
		if err := printKStack(w, k, &sel[i], o); err != nil {
			return err
		}
	}
	return failed
}

// title describes a walked stack in one line.
func (s *kstack) title() string {
	t := ""
	if s.task != nil {
		if s.task.PID >= 0 {
			t = fmt.Sprintf("pid %d %q state %s, task %#x", s.task.PID, s.task.Comm, taskState(s.task.State), s.task.Addr)
		} else {
			t = fmt.Sprintf("task %#x", s.task.Addr)
		}
	}
	if s.kind == "cpu" {
		if t == "" {
			return fmt.Sprintf("cpu %d: from its registers, current task unknown", s.cpu)
		}
		return fmt.Sprintf("cpu %d: from its registers, current %s (%s)", s.cpu, t, s.taskHow)
	}
	if s.cpu >= 0 {
		return fmt.Sprintf("task %s: running on cpu %d: from its registers", t, s.cpu)
	}
	return fmt.Sprintf("task %s: from its cpu_context", t)
}

// stacksString lists a walk's stacks and where their bounds came from.
func stacksString(w *kernel.Walk) string {
	var b strings.Builder
	for _, s := range w.Stacks {
		fmt.Fprintf(&b, "%s [%#x, %#x) %s; ", s.Kind, s.Low, s.High, s.How)
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// printKStack prints one stack: the selected techniques' frames as the
// kernel prints them, each FP frame's origin and stack, and why the SCS
// copy and the FP walk differ.
func printKStack(w io.Writer, k *kernel.Kernel, s *kstack, o *options) error {
	fmt.Fprintf(w, "== %s\n", s.title())
	if s.res.Walk != nil {
		fmt.Fprintf(w, "   stacks: %s\n", stacksString(s.res.Walk))
	}
	for _, n := range s.notes {
		fmt.Fprintf(w, "   %s\n", n)
	}
	useSCS, useFP := o.methods()
	noSCS := errors.Is(s.scsErr, kernel.ErrNotSupported)
	if useSCS && useFP && !noSCS {
		cmp := k.Compare(s.scs, s.res.Frames, s.scsErr, s.res.Err)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tSCS copy\tFP walk [origin, stack]\twhy SCS and FP differ")
		j := 0
		for i, r := range cmp.Rows {
			sc, fw := "-", "-"
			if r.InSCS {
				sc = k.Format(r.SCS.PC)
			}
			if r.InFP && j < len(s.res.Frames) {
				f := s.res.Frames[j]
				fw = fmt.Sprintf("%s [%s, %s]", k.Format(f.PC), f.Origin, f.Stack)
				j++
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", i, sc, fw, r.Note)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	} else {
		list := s.res.Frames
		what := "FP walk"
		if useSCS && !useFP {
			list, what = s.scs, "SCS copy"
		}
		if noSCS && useSCS && !useFP {
			list = nil
		}
		fmt.Fprintf(w, "   %s: %d frames\n", what, len(list))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for i, f := range list {
			raw := ""
			if f.Raw != f.PC {
				raw = fmt.Sprintf("raw %#x", f.Raw)
			}
			origin, stack := f.Origin.String(), f.Stack.String()
			if f.Origin == fp.OriginSCS {
				origin, stack = "scs", "scs"
			}
			fmt.Fprintf(tw, "   #%d\t%s\t[%s, %s]\t%s\n", i, k.Format(f.PC), origin, stack, raw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if useSCS && s.scsErr != nil && !(noSCS && k.BTF != nil) {
		fmt.Fprintf(w, "SCS copy: %v\n", s.scsErr)
	}
	if useFP {
		o.lines.printSources(w, "FP walk", kernelFrames(k, s.res.Frames))
	} else if useSCS {
		o.lines.printSources(w, "SCS copy", kernelFrames(k, s.scs))
	}
	if useFP {
		if s.res.Err != nil {
			fmt.Fprintf(w, "FP walk ended with: %v\n", s.res.Err)
		} else if s.res.End == fp.EndFinal {
			fmt.Fprintf(w, "FP walk ended at the task's final frame record\n")
		} else if s.res.End == fp.EndStopped {
			fmt.Fprintf(w, "FP walk ended at the frame limit\n")
		}
	}
	return nil
}

// taskState is the letter the kernel prints for a task's __state
// (task_state_to_char: TASK_IDLE is I, else the lowest reported bit of
// "RSDTtXZP").
func taskState(st uint64) string {
	const taskIdle = 0x402 // TASK_UNINTERRUPTIBLE | TASK_NOLOAD
	if st&taskIdle == taskIdle {
		return "I"
	}
	for i, c := range "SDTtXZP" {
		if st&(1<<i) != 0 {
			return string(c)
		}
	}
	return "R"
}

// loadBTF reads the BTF of a file given with -btf: a vmcore of the same
// build (its BTF found through its own kallsyms or header scan), a
// vmlinux's .BTF, or raw BTF.
func loadBTF(path string, syms []vmcore.KSym) (*vmcore.BTF, string, error) {
	t, build, err := loadBTF1(path, syms)
	return t, build, err
}

func loadBTF1(path string, syms []vmcore.KSym) (*vmcore.BTF, string, error) {
	k, err := sniff(path)
	if err != nil {
		return nil, "", err
	}
	in, err := openInput(path, coreRatio)
	if err != nil {
		return nil, "", err
	}
	defer in.close()
	switch k {
	case kindBTF:
		if in.size > 64<<20 {
			return nil, "", fmt.Errorf("%s: %d bytes of BTF, more than 64 MiB", path, in.size)
		}
		b := make([]byte, in.size)
		if _, err := in.ReadAt(b, 0); err != nil {
			return nil, "", fmt.Errorf("%s: %w", path, err)
		}
		t, err := vmcore.ParseBTF(b)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", path, err)
		}
		return t, "", nil
	case kindELF:
		t, err := vmcore.VmlinuxBTF(path, in, in.size)
		return t, "", err
	case kindCore:
		v, err := vmcore.Load(path, in, in.size)
		if err != nil {
			return nil, "", err
		}
		if ks, err := v.Kallsyms(); err == nil && len(ks) > 0 {
			syms = ks
		}
		k, err := kernel.New(v, syms, kernel.Options{})
		if err != nil {
			return nil, "", err
		}
		if k.BTF == nil {
			why := "no BTF note"
			for _, n := range k.Notes {
				if strings.HasPrefix(n, "BTF") {
					why = n
				}
			}
			return nil, "", fmt.Errorf("%s: -btf: the dump holds no BTF that was found (%s)", path, why)
		}
		return k.BTF, k.Build(), nil
	}
	return nil, "", fmt.Errorf("%w: -btf %s is %s: want a vmcore, a vmlinux or raw BTF", errUsage, path, k)
}

func isNotSupported(err error) bool { return errors.Is(err, kernel.ErrNotSupported) }
