package kernel_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// drgnTask is one task of a drgn listing: drgnframes.py's (drgn 0.0.22,
// deb-6.1-mod) or drgn03tasks.py's (drgn 0.3, deb-7.2), which print the
// same lines.
type drgnTask struct {
	pid  int
	comm string
	addr uint64
	// frames are drgn's physical frames, innermost first: its inline
	// frames (same pc, "inline") are folded into the frame after them.
	frames []drgnFrame
	// unknownPC is set when drgn's last frame had no pc ("program
	// counter is not known"); err when stack_trace raised.
	unknownPC bool
	err       string
}

type drgnFrame struct {
	pc uint64
	// name is drgn's DWARF function name of the physical frame ("-":
	// none), sym its ELF symbol at pc.
	name, sym string
}

// pcs returns the pcs of d's physical frames.
func (d *drgnTask) pcs() []uint64 {
	out := make([]uint64, len(d.frames))
	for i, f := range d.frames {
		out[i] = f.pc
	}
	return out
}

// drgnListing is a parsed drgn listing: its header's drgn version, the
// pid current on each CPU where the header gives it (drgnframes.py's
// "pr_pid per CPU: cpu0=N ..."), and the tasks by task_struct address.
type drgnListing struct {
	version string
	pids    []int
	tasks   map[uint64]*drgnTask
}

// readDrgn parses a drgn listing:
//
//	# drgn VERSION over FILE [(... pr_pid per CPU: cpu0=N cpu1=M)]
//	task PID COMM 0xTASK_STRUCT
//	  #N 0xPC SYMBOL [inline] FUNCTION FILE:LINE
//	  #N pc unknown: ...
//	  error: MESSAGE
func readDrgn(t *testing.T, path string) *drgnListing {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	l := &drgnListing{tasks: map[uint64]*drgnTask{}}
	var cur *drgnTask
	sc := bufio.NewScanner(zr)
	for ln := 1; sc.Scan(); ln++ {
		line := sc.Text()
		f := strings.Fields(line)
		bad := func() { t.Fatalf("%s:%d: %q", path, ln, line) }
		switch {
		case strings.HasPrefix(line, "# drgn "):
			if len(f) < 3 {
				bad()
			}
			l.version = f[2]
			_, per, ok := strings.Cut(line, "pr_pid per CPU: ")
			if !ok {
				continue
			}
			for _, c := range strings.Fields(strings.TrimSuffix(per, ")")) {
				_, v, _ := strings.Cut(c, "=")
				p, err := strconv.Atoi(v)
				if err != nil {
					bad()
				}
				l.pids = append(l.pids, p)
			}
		case strings.HasPrefix(line, "task "):
			if len(f) < 4 {
				bad()
			}
			pid, err1 := strconv.Atoi(f[1])
			a, err2 := strconv.ParseUint(f[len(f)-1], 0, 64)
			if err1 != nil || err2 != nil {
				bad()
			}
			cur = &drgnTask{pid: pid, comm: strings.Join(f[2:len(f)-1], " "), addr: a}
			l.tasks[a] = cur
		case cur == nil:
			bad()
		case strings.HasPrefix(line, "  error: "):
			cur.err = line[len("  error: "):]
		case len(f) >= 3 && f[1] == "pc" && f[2] == "unknown:":
			cur.unknownPC = true
		case len(f) >= 5 && strings.HasPrefix(f[0], "#"):
			pc, err := strconv.ParseUint(f[1], 0, 64)
			if err != nil {
				bad()
			}
			if f[3] == "inline" {
				continue
			}
			cur.frames = append(cur.frames, drgnFrame{pc: pc, sym: f[2], name: f[3]})
		default:
			bad()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return l
}

// The rules that explain each difference between drgn 0.0.22's frames
// and the library's, each checked on the frames it is claimed for.
const (
	ruleSame = "identical"
	// At a CPU stopped in a function's patchable-entry NOPs (func+0x0,
	// before paciasp and the frame record), the caller's return address
	// is only in x30; drgn does not report it and takes its next frame
	// from the frame record x29 points at, the caller's caller.
	ruleX30 = "drgn loses the x30 caller at an ftrace NOP stop"
	// After that frame-record step from a stopped pc it has no CFI for
	// (the NOPs, the exception vectors), drgn has no pc for the next
	// frame ("program counter is not known"): it ends where the library
	// walks on, every frame it has being the library's too.
	ruleEnds = "drgn ends after one frame-record step from the stopped pc"
	// A CPU stopped on its IRQ stack: drgn gives the stopped pc alone;
	// the library crosses the IRQ stack and pt_regs into the task.
	ruleIRQ = "drgn stops on the IRQ stack"
	// A return address that is a function's end (the call was its last
	// instruction, a noreturn call) is the next function's first byte:
	// drgn names the frame by pc - 1, the calling function, while
	// kallsyms (and the kernel's %pS) names the next one.
	rulePCMinus1 = "drgn names pc - 1 for a return address at a function's end"
)

// TestDrgnTasks checks the library's per-task walks against drgn's
// (drgn-STOP.txt.gz, written by testdata/kernel/drgnframes.py over the
// full raw dumps of capture deb-6.1-mod with Debian's -dbg vmlinux and
// the module's .ko): at the sysrq-t stop every task of drgn's
// for_each_task, blocked or running, and at the two sysrq-l stops the
// tasks running on a CPU (the trimmed vmcores hold only their stacks).
// Blocked tasks must agree frame by frame (pc); every difference must be
// one of the rules above, checked on the frames themselves.
func TestDrgnTasks(t *testing.T) {
	cp, err := kcapture.OpenCapture(modCapture)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	tasks, frames := 0, 0
	defer func() {
		t.Logf("%d tasks, %d of drgn's physical frames compared", tasks, frames)
		for r, n := range counts {
			t.Logf("%3d: %s", n, r)
		}
	}()
	for i := range cp.Expected.Stops {
		s := &cp.Expected.Stops[i]
		dl := readDrgn(t, filepath.Join(modCapture, "drgn-"+s.Name+".txt.gz"))
		dt, pids := dl.tasks, dl.pids
		k, err := cp.Kernel(s)
		if err != nil {
			t.Fatal(err)
		}
		// drgn's pr_pid per CPU is the pid of per_cpu(__entry_task).
		for c, p := range pids {
			cur, _, err := k.Current(c)
			if err != nil {
				t.Fatalf("%s: cpu %d: %v", s.Name, c, err)
			}
			d, ok := dt[cur]
			if !ok || d.pid != p {
				t.Errorf("%s: cpu %d: current %#x, drgn's pr_pid %d", s.Name, c, cur, p)
			}
		}
		if s.Name != "t" {
			// The trimmed sysrq-l vmcores hold the running tasks' stacks
			// only, not the task list: each CPU's current task.
			for c := range pids {
				cur, _, _ := k.Current(c)
				d := dt[cur]
				if d == nil {
					t.Fatalf("%s: cpu %d: current task %#x is not among drgn's", s.Name, c, cur)
				}
				if k.V.CPUs[c].Regs.Pstate>>2&3 == 0 {
					continue // in user mode: no kernel frames
				}
				w, err := k.CPUWalk(c)
				if err != nil {
					t.Fatalf("%s: cpu %d: %v", s.Name, c, err)
				}
				fs, _, err := w.Run()
				if err != nil {
					t.Fatalf("%s: cpu %d: %v", s.Name, c, err)
				}
				tasks++
				frames += len(d.frames)
				task := kernel.Task{Addr: cur, PID: d.pid, Comm: d.comm}
				for _, r := range compareDrgn(t, k, s.Name, task, c, fs, d) {
					counts[r]++
				}
			}
			continue
		}
		ts, err := k.Tasks(0)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, task := range ts {
			d, ok := dt[task.Addr]
			if !ok {
				// drgn's for_each_task walks the pid table, which has no
				// pid 0: init_task (swapper/0) is only in the task list.
				if task.PID != 0 {
					t.Errorf("%s: task %d %s is not in drgn's for_each_task", s.Name, task.PID, task.Comm)
				}
				continue
			}
			seen++
			cpu := k.RunningOn(task.Addr)
			if d.pid != task.PID || d.comm != task.Comm {
				t.Errorf("%s: task %#x: pid %d %s, drgn's %d %s", s.Name, task.Addr, task.PID, task.Comm, d.pid, d.comm)
			}
			w, err := k.TaskWalk(task)
			if err != nil {
				t.Errorf("%s: task %d: %v", s.Name, task.PID, err)
				continue
			}
			fs, _, err := w.Run()
			if err != nil {
				t.Errorf("%s: task %d: %v", s.Name, task.PID, err)
				continue
			}
			tasks++
			frames += len(d.frames)
			for _, r := range compareDrgn(t, k, s.Name, task, cpu, fs, d) {
				counts[r]++
			}
		}
		if seen != len(dt) {
			t.Errorf("%s: %d of drgn's %d tasks are in the task list", s.Name, seen, len(dt))
		}
	}
	if counts[ruleSame] < 50 {
		t.Errorf("only %d tasks identical to drgn's", counts[ruleSame])
	}
}

// compareDrgn returns the rules that explain how drgn's frames d differ
// from the walk fs of task (running on cpu, or -1), failing t on any
// difference no rule explains.
func compareDrgn(t *testing.T, k *kernel.Kernel, stop string, task kernel.Task, cpu int, fs []unwind.Frame, d *drgnTask) []string {
	t.Helper()
	where := fmt.Sprintf("%s: task %d %s", stop, task.PID, task.Comm)
	var rules []string
	// Names: drgn's DWARF name of each frame against kallsyms'.
	for i, f := range d.frames {
		s, ok := k.Sym(f.pc)
		if !ok || f.name == "-" || baseName(s.Name) == f.name {
			continue
		}
		// the frame is a return address at its function's end: pc is the
		// next symbol's first byte, and pc - 1 is in the function drgn names.
		p, ok1 := k.Sym(f.pc - 1)
		if i > 0 && f.pc == s.Addr && ok1 && baseName(p.Name) == f.name {
			rules = append(rules, rulePCMinus1)
			continue
		}
		t.Errorf("%s: frame %d %#x: drgn names %s, kallsyms %s", where, i, f.pc, f.name, k.Format(f.pc))
	}
	ours := make([]uint64, len(fs))
	for i, f := range fs {
		ours[i] = f.PC
	}
	theirs := make([]uint64, len(d.frames))
	for i, f := range d.frames {
		theirs[i] = f.pc
	}
	if d.err != "" {
		t.Errorf("%s: drgn failed: %s", where, d.err)
		return rules
	}
	if equalPCs(ours, theirs) && !d.unknownPC {
		return append(rules, ruleSame)
	}
	if cpu < 0 {
		t.Errorf("%s (blocked):\n ours %s\n drgn %s", where, pcList(k, ours), pcList(k, theirs))
		return rules
	}
	// A running task: walked from its CPU's registers.
	r := &k.V.CPUs[cpu].Regs
	if len(fs) == 0 || len(theirs) == 0 || ours[0] != theirs[0] || theirs[0] != r.PC {
		t.Errorf("%s on cpu %d: first frames %s, drgn %s, pc %#x", where, cpu, pcList(k, ours), pcList(k, theirs), r.PC)
		return rules
	}
	if len(fs) > 1 && fs[1].Origin == fp.OriginLR {
		s, ok := k.Sym(r.PC)
		if !ok || r.PC != s.Addr || (len(theirs) > 1 && theirs[1] == ours[1]) {
			t.Errorf("%s on cpu %d: x30 frame %s at a stop at %s", where, cpu, k.Format(ours[1]), k.Format(r.PC))
			return rules
		}
		rules = append(rules, ruleX30)
		ours = append([]uint64{ours[0]}, ours[2:]...)
		fs = append([]unwind.Frame{fs[0]}, fs[2:]...)
	}
	if len(theirs) > len(ours) || !equalPCs(ours[:len(theirs)], theirs) {
		t.Errorf("%s on cpu %d: drgn's frames are not the walk's:\n ours %s\n drgn %s", where, cpu, pcList(k, ours), pcList(k, theirs))
		return rules
	}
	switch {
	case len(theirs) == 1 && fs[0].Stack == fp.IRQ && !d.unknownPC:
		rules = append(rules, ruleIRQ)
	case len(theirs) == 2 && d.unknownPC && fs[1].Origin == fp.OriginFrame:
		rules = append(rules, ruleEnds)
	default:
		t.Errorf("%s on cpu %d: drgn ends after %d of %d frames (pc unknown: %v), no rule says why", where, cpu, len(theirs), len(ours), d.unknownPC)
	}
	return rules
}

// baseName drops a compiler suffix (.constprop.0, .isra.0, ...) that the
// ELF symbol has and the DWARF name has not.
func baseName(s string) string {
	if i := strings.IndexByte(s, '.'); i > 0 {
		return s[:i]
	}
	return s
}

func equalPCs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func pcList(k *kernel.Kernel, pcs []uint64) string {
	var b strings.Builder
	for _, pc := range pcs {
		b.WriteString(" " + k.Format(pc))
	}
	return b.String()
}
