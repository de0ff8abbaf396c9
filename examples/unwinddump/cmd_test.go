package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
)

const td = "../../testdata/"

// cmd runs the command in process and returns its output and exit status.
func cmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := realMain(args, &out, &errb)
	return out.String(), errb.String(), code
}

func decode(t *testing.T, out string) *jsonDoc {
	t.Helper()
	var d jsonDoc
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("decoding -json output: %v\n%.2000s", err, out)
	}
	if d.Schema != schemaVersion {
		t.Errorf("schema %d", d.Schema)
	}
	return &d
}

// printedOf returns a walk's frames as the kernel prints them.
func printedOf(w *jsonWalk) []string {
	var out []string
	for _, f := range w.Frames {
		out = append(out, f.Printed)
	}
	return out
}

// TestExitStatus checks the command's conventions: -h prints the usage
// and exits 0, a usage error exits 2, a failure 1. The old command opened
// "-h" as a file and exited 1, and exited 0 with "bad magic number" for a
// vmcore given with its symbols.
func TestExitStatus(t *testing.T) {
	cap := td + "kernel/scs-6.12"
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"-h"}, 0, "usage: unwinddump"},
		{[]string{"-help"}, 0, "-method"},
		{nil, 2, "no input"},
		{[]string{"-bogus", "x"}, 2, "flag provided but not defined"},
		{[]string{"-method", "dwarf", cap}, 2, `-method "dwarf"`},
		{[]string{"-task", "zz", cap}, 2, `-task "zz"`},
		{[]string{"-cpu", "1", "-pid", "1", cap}, 2, "give one of them"},
		{[]string{"-json", cap}, 2, "kernel capture directory"},
		{[]string{td + "arm64/snapshots/gcc-pacret-pauth-signal.json", "x"}, 2, "is a snapshot"},
		{[]string{"-tasks", td + "cores/cores/gcc-pie-pauth-leaf.core.gz", td + "cores/bin/gcc-pie.elf.gz"}, 2, "is a user core"},
		{[]string{cap + "/l-ipi.vmcore.gz", td + "arm64/snapshots/gcc-pacret-pauth-signal.json"}, 2, "not a kernel symbol source"},
		{[]string{td + "cores/cores/gcc-pie-pauth-leaf.core.gz", cap + "/syms.txt.gz"}, 2, "not an executable or library"},
		{[]string{"no-such-file"}, 1, "no such file"},
		{[]string{td + "README.md"}, 1, "not a vmcore, a user core"},
		{[]string{td + "kernel"}, 1, "without expected.json"},
		{[]string{td + "cores/cores/gcc-pie-pauth-leaf.core.gz"}, 1, "needs its executable"},
		// A vmcore without symbols, and one of which no stack can be
		// walked (the SCS copy of a kernel without SCS): failures.
		{[]string{cap + "/l-ipi.vmcore.gz"}, 1, "no symbols: the dump holds no kallsyms tables"},
		{[]string{"-method", "scs", td + "kernel/deb-6.12/t.vmcore.gz", td + "kernel/deb-6.12/syms.txt.gz", "-btf", td + "kernel/deb-6.12/l-syscall.vmcore.gz"}, 1, "no stack could be walked"},
		{[]string{"-cpu", "7", cap + "/l-ipi.vmcore.gz", cap + "/syms.txt.gz", "-btf", cap + "/l-syscall.vmcore.gz"}, 1, "no cpu 7"},
	} {
		out, errs, code := cmd(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.stderr) {
			t.Errorf("%q: exit %d, want %d; stderr lacks %q:\n%s\n%.500s", c.args, code, c.code, c.stderr, errs, out)
		}
	}
	// Flags after the files, and "--".
	if _, errs, code := cmd(t, cap+"/l-ipi.vmcore.gz", "-cpu", "0", cap+"/syms.txt.gz", "-btf", cap+"/l-syscall.vmcore.gz"); code != 0 {
		t.Errorf("flags among the files: exit %d: %s", code, errs)
	}
	if _, errs, code := cmd(t, "--", "-cpu"); code != 1 || !strings.Contains(errs, "-cpu: no such file") {
		t.Errorf("-- then a file named -cpu: exit %d: %s", code, errs)
	}
}

// captureArgs returns the arguments that unwind a capture's stop from its
// vmcore alone, without the SP_EL0 the debugger printed: the symbols
// (kallsyms as the capture's /proc/kallsyms had them, plus vmlinux's data
// symbols as a System.map where kallsyms has none) and the BTF of the
// first stop's vmcore (the trimmed dumps ship it once).
func captureArgs(t *testing.T, dir, stop string, extra ...string) []string {
	t.Helper()
	args := append(extra, filepath.Join(dir, stop+".vmcore.gz"), filepath.Join(dir, "syms.txt.gz"))
	if _, err := os.Stat(filepath.Join(dir, "datasyms.txt.gz")); err == nil {
		args = append(args, filepath.Join(dir, "datasyms.txt.gz"))
	}
	return append(args, "-btf", filepath.Join(dir, "l-syscall.vmcore.gz"))
}

var captures = []string{"deb-6.1", "deb-6.1-mod", "deb-6.12", "deb-6.12-nolva", "deb-7.2", "scs-6.12", "scs-6.12-onstack", "scs-6.1", "scs-6.1-onstack", "scs-6.12-percpu", "scs-7.2"}

// TestVmcoreStoppedCPU unwinds every stop's stopped CPU from the vmcore
// (-cpu N -json) and checks its FP walk ends with the kernel's printed
// Call trace, frame by frame, and that the text output shows the same
// frames.
func TestVmcoreStoppedCPU(t *testing.T) {
	for _, name := range captures {
		dir := td + "kernel/" + name
		cp, err := kcapture.OpenCapture(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range cp.Expected.Stops {
			cpu := fmt.Sprint(s.StoppedCPU)
			out, errs, code := cmd(t, captureArgs(t, dir, s.Name, "-json", "-cpu", cpu)...)
			if code != 0 {
				t.Errorf("%s %s: exit %d: %s", name, s.Name, code, errs)
				continue
			}
			d := decode(t, out)
			if d.Kind != "vmcore" || len(d.Stacks) != 1 || d.Stacks[0].Kind != "cpu" || d.Stacks[0].CPU != s.StoppedCPU || d.Stacks[0].FP == nil {
				t.Errorf("%s %s: stacks %+v", name, s.Name, d.Stacks)
				continue
			}
			st := d.Stacks[0]
			walk := printedOf(st.FP)
			printed := cp.Expected.Traces[s.Trace].Frames
			chain := walk
			if s.Name == "x30" && len(chain) > 1 {
				// The stopped function prints at the offset of its
				// later call: compare from its caller.
				chain = chain[1:]
				printed = printed[kcapture.PrintedFrom(printed)+1:]
			}
			if _, err := kcapture.MatchPrinted(chain, printed); err != nil {
				t.Errorf("%s %s: %v\nwalk %q", name, s.Name, err, walk)
			}
			if st.FP.End != "final" || st.FP.Error != "" || len(st.Errors) != 0 {
				t.Errorf("%s %s: end %q, error %q, errors %q", name, s.Name, st.FP.End, st.FP.Error, st.Errors)
			}
			hasSCS := strings.HasPrefix(name, "scs")
			if (st.SCS != nil) != hasSCS || hasSCS && len(st.SCS.Frames) == 0 {
				t.Errorf("%s %s: SCS copy %+v", name, s.Name, st.SCS)
			}
			for _, f := range st.FP.Frames {
				if !strings.HasPrefix(f.PC, "0x") || !strings.HasPrefix(f.Raw, "0x") || f.Symbol == "" || f.Size == 0 || f.Offset >= f.Size ||
					f.Printed != fmt.Sprintf("%s+%#x/%#x", f.Symbol, f.Offset, f.Size) || f.Origin == "" || f.Stack == "" || f.Inlined == nil {
					t.Errorf("%s %s: frame %+v", name, s.Name, f)
				}
			}
			// The text output: the same frames in the FP column, in order.
			text, _, code := cmd(t, captureArgs(t, dir, s.Name, "-cpu", cpu)...)
			flat := strings.Join(strings.Fields(text), " ")
			at := 0
			for _, f := range st.FP.Frames {
				i := strings.Index(flat[at:], f.Printed+" ["+f.Origin+", "+f.Stack+"]")
				if i < 0 {
					t.Errorf("%s %s: text output lacks %s [%s, %s] after offset %d:\n%s", name, s.Name, f.Printed, f.Origin, f.Stack, at, text)
					break
				}
				at += i
			}
			if code != 0 || !strings.Contains(text, "== cpu "+cpu+": from its registers, current ") {
				t.Errorf("%s %s: exit %d:\n%s", name, s.Name, code, text)
			}
		}
	}
}

// blockedTasks checks the -tasks -json walks of a capture's t stop
// against every blocked task's printed trace and returns how many match.
func blockedTasks(t *testing.T, name string, d *jsonDoc) (same, blocked int) {
	cp, err := kcapture.OpenCapture(td + "kernel/" + name)
	if err != nil {
		t.Fatal(err)
	}
	byPID := map[int]*jsonStack{}
	for i := range d.Stacks {
		if s := &d.Stacks[i]; s.Kind == "task" {
			byPID[s.PID] = s
		}
	}
	for _, tr := range cp.Expected.Traces {
		if tr.Scenario != "t" || tr.PID < 0 || tr.State == "R" {
			continue
		}
		blocked++
		s := byPID[tr.PID]
		if s == nil || s.FP == nil {
			t.Errorf("%s: pid %d (%s) not walked", name, tr.PID, tr.Comm)
			continue
		}
		if got := printedOf(s.FP); fmt.Sprint(got) != fmt.Sprint(tr.Frames) || s.FP.Error != "" {
			t.Errorf("%s: pid %d: walk %q (%s), printed %q", name, tr.PID, got, s.FP.Error, tr.Frames)
			continue
		}
		// The state is the dump's: a task may be woken (R) between
		// the dump and its printing (deb-6.12's rcu_sched, printed I).
		if s.Comm != tr.Comm || s.State == "" {
			t.Errorf("%s: pid %d: comm %q state %q, printed %q %q", name, tr.PID, s.Comm, s.State, tr.Comm, tr.State)
		}
		same++
	}
	return same, blocked
}

// TestVmcoreTasks walks every task of each capture's t stop (-tasks) and
// checks each blocked task's walk equals its printed trace, as the
// capture view does (TestDumpKernel), here from the vmcore alone;
// deb-6.1-mod's ukit thread through four module frames among them
// ("func+0xoff/0xsize [ukit]", named from the dump's module list).
func TestVmcoreTasks(t *testing.T) {
	for _, c := range []struct {
		name    string
		blocked int
	}{{"deb-6.1", 50}, {"deb-6.1-mod", 51}, {"deb-6.12", 55}, {"deb-7.2", 54}, {"scs-6.12", 33}, {"scs-6.1-onstack", 25}} {
		out, errs, code := cmd(t, captureArgs(t, td+"kernel/"+c.name, "t", "-json", "-tasks")...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.name, code, errs)
		}
		d := decode(t, out)
		same, blocked := blockedTasks(t, c.name, d)
		if same != c.blocked || blocked != c.blocked {
			t.Errorf("%s: %d of %d blocked tasks match, want %d", c.name, same, blocked, c.blocked)
		}
		// The running writer (sh, current on the stopped CPU) is walked
		// from that CPU's registers.
		running := 0
		for _, s := range d.Stacks {
			if s.Kind == "task" && s.CPU >= 0 {
				running++
				if s.State != "R" || s.FP == nil || len(s.FP.Frames) == 0 || s.FP.Frames[0].Origin != "stop-pc" {
					t.Errorf("%s: running task %+v", c.name, s)
				}
			}
		}
		if running == 0 {
			t.Errorf("%s: no task walked from a CPU's registers", c.name)
		}
	}
}

// stockKallsyms writes the text symbols of a capture's symbol file
// (kallsyms without CONFIG_KALLSYMS_ALL: functions, and _etext, the end
// of the text range, which it keeps) and the full file as a System.map.
func stockKallsyms(t *testing.T, dir string) (kallsyms, sysmap string) {
	t.Helper()
	b, err := gunzipFile(filepath.Join(dir, "syms.txt.gz"))
	if err != nil {
		t.Fatal(err)
	}
	var text, data bytes.Buffer
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.ContainsAny(f[1], "dDbBrR") && f[2] != "_etext" {
			data.WriteString(line)
			continue
		}
		text.WriteString(line)
	}
	if data.Len() == 0 {
		t.Fatalf("%s: no data symbols to remove", dir)
	}
	tmp := t.TempDir()
	kallsyms, sysmap = filepath.Join(tmp, "kallsyms"), filepath.Join(tmp, "System.map")
	if err := os.WriteFile(kallsyms, text.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// System.map holds every symbol (nm -n), the functions too.
	if err := os.WriteFile(sysmap, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return kallsyms, sysmap
}

// TestStockDumpWithSystemMap simulates a stock Debian dump, whose
// kallsyms has no data symbols (no CONFIG_KALLSYMS_ALL: no init_task,
// __per_cpu_offset, __entry_task, irq_stack_ptr): from kallsyms alone no
// CPU's current task and no task is known, so nothing unwinds; with a
// System.map beside it every CPU and every task unwinds, from the vmcore
// alone (no SP_EL0). The old command took no symbol file at all.
func TestStockDumpWithSystemMap(t *testing.T) {
	for _, c := range []struct {
		name    string
		blocked int
	}{{"deb-6.12", 55}, {"deb-7.2", 54}, {"scs-6.12", 33}} {
		dir := td + "kernel/" + c.name
		ks, sm := stockKallsyms(t, dir)
		btf := filepath.Join(dir, "l-syscall.vmcore.gz")
		vm := filepath.Join(dir, "t.vmcore.gz")
		// Alone: no current task, no task list: each CPU is walked
		// only as the least a dump offers (guessed stack bounds), and
		// says so.
		out, errs, code := cmd(t, "-json", "-tasks", vm, ks, "-btf", btf)
		if d := decode(t, out); code != 0 || !strings.Contains(errs, "init_task is not among the symbols") || len(d.Stacks) != 2 {
			t.Errorf("%s: stock kallsyms alone: exit %d: %s\n%.3000s", c.name, code, errs, out)
		} else {
			for _, s := range d.Stacks {
				if s.Kind != "cpu" || s.Task != "" || !strings.Contains(fmt.Sprint(s.Notes), "GUESS: the kernel's stack bounds are unknown (current task of cpu") {
					t.Errorf("%s: stock kallsyms alone: %+v", c.name, s)
				}
			}
		}
		out, errs, code = cmd(t, "-json", "-tasks", vm, ks, sm, "-btf", btf)
		if code != 0 {
			t.Fatalf("%s: with System.map: exit %d: %s", c.name, code, errs)
		}
		d := decode(t, out)
		merged := false
		for _, n := range d.Notes {
			merged = merged || strings.Contains(n, "data symbols added from "+sm)
		}
		if !merged {
			t.Errorf("%s: no note of the merge: %q", c.name, d.Notes)
		}
		cpus := 0
		for _, s := range d.Stacks {
			if s.Kind == "cpu" {
				cpus++
				if s.FP == nil || len(s.FP.Frames) == 0 || s.Task == "" || s.PID < 0 || strings.Contains(fmt.Sprint(s.Notes), "GUESS") {
					t.Errorf("%s: cpu %d: %+v", c.name, s.CPU, s)
				}
			}
		}
		same, blocked := blockedTasks(t, c.name, d)
		if cpus != 2 || same != c.blocked || blocked != c.blocked {
			t.Errorf("%s: %d CPUs, %d of %d blocked tasks match, want 2 and %d", c.name, cpus, same, blocked, c.blocked)
		}
	}
	// Debian's 6.1 as shipped: its kallsyms is the stock one, and
	// datasyms.txt.gz is nm's output of its vmlinux (System.map's format).
	dir := td + "kernel/deb-6.1"
	args := []string{"-json", "-tasks", dir + "/t.vmcore.gz", dir + "/kallsyms.txt.gz", "-btf", dir + "/l-syscall.vmcore.gz"}
	if out, _, code := cmd(t, args...); code != 0 || strings.Count(out, "GUESS: the kernel's stack bounds are unknown") != 2 || strings.Contains(out, `"kind": "task"`) {
		t.Errorf("deb-6.1 stock kallsyms: exit %d:\n%.2000s", code, out)
	}
	out, errs, code := cmd(t, append(args, dir+"/datasyms.txt.gz")...)
	if code != 0 {
		t.Fatalf("deb-6.1 with its data symbols: exit %d: %s", code, errs)
	}
	if same, blocked := blockedTasks(t, "deb-6.1", decode(t, out)); same != 50 || blocked != 50 {
		t.Errorf("deb-6.1: %d of %d blocked tasks match", same, blocked)
	}
}

// TestVmcoreSelect checks -cpu, -pid, -task and -method on a kernel with
// shadow call stacks.
func TestVmcoreSelect(t *testing.T) {
	dir := td + "kernel/scs-6.12"
	out, errs, code := cmd(t, captureArgs(t, dir, "t", "-json", "-tasks")...)
	if code != 0 {
		t.Fatal(errs)
	}
	all := decode(t, out)
	var pick *jsonStack
	for i := range all.Stacks {
		if s := &all.Stacks[i]; s.Kind == "task" && s.State == "S" && s.SCS != nil && len(s.SCS.Frames) > 2 {
			pick = s
			break
		}
	}
	if pick == nil {
		t.Fatal("no blocked task with an SCS copy")
	}
	for _, sel := range [][]string{{"-pid", fmt.Sprint(pick.PID)}, {"-task", pick.Task}} {
		out, errs, code := cmd(t, captureArgs(t, dir, "t", append([]string{"-json"}, sel...)...)...)
		if code != 0 {
			t.Fatalf("%q: %s", sel, errs)
		}
		d := decode(t, out)
		if len(d.Stacks) != 1 || d.Stacks[0].PID != pick.PID || d.Stacks[0].Task != pick.Task ||
			fmt.Sprint(printedOf(d.Stacks[0].FP)) != fmt.Sprint(printedOf(pick.FP)) {
			t.Errorf("%q: %+v", sel, d.Stacks)
		}
	}
	if _, errs, code := cmd(t, captureArgs(t, dir, "t", "-pid", "99999")...); code != 1 || !strings.Contains(errs, "no task of pid 99999") {
		t.Errorf("-pid 99999: exit %d: %s", code, errs)
	}
	if _, errs, code := cmd(t, captureArgs(t, dir, "t", "-task", "0x1234")...); code != 1 || !strings.Contains(errs, "no task_struct at 0x1234") {
		t.Errorf("-task 0x1234: exit %d: %s", code, errs)
	}
	// Without -tasks only the CPUs.
	out, _, _ = cmd(t, captureArgs(t, dir, "t", "-json")...)
	if d := decode(t, out); len(d.Stacks) != 2 || d.Stacks[0].Kind != "cpu" || d.Stacks[1].Kind != "cpu" {
		t.Errorf("default: %d stacks", len(d.Stacks))
	}
	for _, m := range []string{"scs", "fp", "both"} {
		out, errs, code := cmd(t, captureArgs(t, dir, "l-ipi", "-json", "-cpu", "0", "-method", m)...)
		if code != 0 {
			t.Fatal(errs)
		}
		s := decode(t, out).Stacks[0]
		if (s.SCS != nil) != (m != "fp") || (s.FP != nil) != (m != "scs") {
			t.Errorf("-method %s: scs %v, fp %v", m, s.SCS != nil, s.FP != nil)
		}
		if s.SCS != nil && (len(s.SCS.Frames) < 10 || s.SCS.Frames[1].Stack != "scs" || s.SCS.Frames[1].Origin != "scs") {
			t.Errorf("-method %s: SCS copy %+v", m, s.SCS)
		}
		text, _, _ := cmd(t, captureArgs(t, dir, "l-ipi", "-cpu", "0", "-method", m)...)
		table := strings.Contains(text, "why SCS and FP differ")
		if table != (m == "both") || m == "scs" && !strings.Contains(text, "SCS copy: ") || m == "fp" && !strings.Contains(text, "FP walk: ") {
			t.Errorf("-method %s text:\n%s", m, text)
		}
	}
}

// TestUserJSON checks -json, -method and -pid on a user core and a
// snapshot against their text output.
func TestUserJSON(t *testing.T) {
	core, exe := td+"cores/cores/clang-pacret-pauth-signal.core.gz", td+"cores/bin/clang-pacret.elf.gz"
	out, errs, code := cmd(t, "-json", core, exe)
	if code != 0 {
		t.Fatal(errs)
	}
	d := decode(t, out)
	if d.Kind != "core" || len(d.Stacks) != 1 || d.Stacks[0].Kind != "thread" || d.Stacks[0].FP == nil || d.Stacks[0].SCS == nil {
		t.Fatalf("%+v", d)
	}
	st := d.Stacks[0]
	text, _, _ := cmd(t, core, exe)
	var names []string
	for _, f := range st.FP.Frames {
		names = append(names, f.Symbol)
		if !strings.Contains(text, f.Raw) || !strings.Contains(text, f.Printed) {
			t.Errorf("text lacks frame %+v", f)
		}
	}
	for _, want := range []string{"handler_inner", "sig_mid", "sig_root", "main"} {
		if !strings.Contains(fmt.Sprint(names), want) {
			t.Errorf("FP frames %q lack %s", names, want)
		}
	}
	if len(st.Notes) == 0 {
		t.Error("no notes of the differences")
	}
	pid := fmt.Sprint(st.PID)
	if out, _, code := cmd(t, "-json", "-pid", pid, "-method", "fp", core, exe); code != 0 || decode(t, out).Stacks[0].SCS != nil {
		t.Errorf("-pid %s -method fp: exit %d", pid, code)
	}
	if _, errs, code := cmd(t, "-pid", "1", core, exe); code != 1 || !strings.Contains(errs, "no thread of pid 1") {
		t.Errorf("-pid 1: exit %d %s", code, errs)
	}
	if text, _, _ := cmd(t, "-method", "scs", core, exe); !strings.Contains(text, "SCS copy: ") || strings.Contains(text, "why they differ") {
		t.Errorf("-method scs:\n%s", text)
	}
	snap := td + "arm64/snapshots/gcc-pacret-pauth-signal.json"
	out, errs, code = cmd(t, "-json", snap)
	if code != 0 {
		t.Fatal(errs)
	}
	d = decode(t, out)
	if d.Kind != "snapshot" || len(d.Stacks) != 1 || len(d.Stacks[0].SCS.Frames) != 6 || len(d.Stacks[0].FP.Frames) != 9 {
		t.Errorf("snapshot: %+v", d.Stacks)
	}
	if text, _, _ := cmd(t, "-method", "fp", snap); !strings.Contains(text, "FP walk: 9 frames") {
		t.Errorf("snapshot -method fp:\n%s", text)
	}
}

// TestKindOf recognises inputs by content, compressed or not, whatever
// their names.
func TestKindOf(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte, gz bool) string {
		if gz {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			zw.Write(b)
			zw.Close()
			b = z.Bytes()
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	core := make([]byte, 64)
	copy(core, "\x7fELF\x02\x01\x01")
	core[16] = 4
	exec := append([]byte(nil), core...)
	exec[16] = 2
	for _, c := range []struct {
		path string
		want kind
	}{
		{td + "kernel/deb-6.1", kindCapture},
		{write("a", core, false), kindCore},
		{write("b.txt", core, true), kindCore},
		{write("c", exec, false), kindELF},
		{write("d", []byte("  {\"regs\": 1}"), false), kindSnapshot},
		{write("e", []byte("ffff800008000000 T _text\nffff800008010000 t gic_handle_irq\n"), true), kindSymText},
		{write("f", []byte("ffffffffc0000000 t foo\t[mod]\n"), false), kindSymText},
		{write("g", []byte{0x9f, 0xeb, 1, 0, 24, 0, 0, 0}, false), kindBTF},
		{write("h", []byte("hello world\n"), false), kindUnknown},
		{write("i", nil, false), kindUnknown},
	} {
		got, err := sniff(c.path)
		if err != nil || got != c.want {
			t.Errorf("%s: %v, %v; want %v", c.path, got, err, c.want)
		}
	}
}

// TestGuessedBounds: without BTF (no task_struct.stack) the stopped CPU
// is walked over the THREAD_SIZE blocks holding its frame records, the
// least a dump offers; on every stop whose vmcore holds no BTF it gives
// the frames the kernel's own bounds give, across the IRQ stack into the
// task, and says it guessed.
func TestGuessedBounds(t *testing.T) {
	n := 0
	for _, name := range captures {
		dir := td + "kernel/" + name
		cp, err := kcapture.OpenCapture(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range cp.Expected.Stops[1:] {
			cpu := fmt.Sprint(s.StoppedCPU)
			out, _, _ := cmd(t, captureArgs(t, dir, s.Name, "-json", "-method", "fp", "-cpu", cpu)...)
			want := printedOf(decode(t, out).Stacks[0].FP)
			args := captureArgs(t, dir, s.Name, "-json", "-method", "fp", "-cpu", cpu)
			out, errs, code := cmd(t, args[:len(args)-2]...) // no -btf
			if code != 0 {
				t.Errorf("%s %s: exit %d: %s", name, s.Name, code, errs)
				continue
			}
			st := decode(t, out).Stacks[0]
			if got := printedOf(st.FP); fmt.Sprint(got) != fmt.Sprint(want) || st.FP.End != "final" {
				t.Errorf("%s %s: guessed %q (%s), want %q", name, s.Name, got, st.FP.Error, want)
			}
			if !strings.Contains(fmt.Sprint(st.Notes), "GUESS: the kernel's stack bounds are unknown (offset task_struct.stack unknown (no BTF))") {
				t.Errorf("%s %s: notes %q", name, s.Name, st.Notes)
			}
			n++
		}
	}
	if n != 28 {
		t.Errorf("%d stops checked", n)
	}
}

// The vmcores of testdata/vmcores (full kallsyms in the dump, no BTF, no
// per-CPU data symbols used) unwind each idle CPU from the dump alone,
// with guessed stack bounds, to its final frame record.
func TestVmcoresAlone(t *testing.T) {
	for _, c := range []struct{ name, first, second string }{
		{"debian-6.1.0-57-va48", "__primary_switched", "__secondary_switched"},
		{"debian-6.12.111+deb12-va48", "__primary_switched", "__secondary_switched"},
		{"debian-6.12.111+deb12-va52", "__primary_switched", "__secondary_switched"},
	} {
		out, errs, code := cmd(t, "-json", td+"vmcores/"+c.name+".vmcore.gz")
		if code != 0 {
			t.Errorf("%s: exit %d: %s", c.name, code, errs)
			continue
		}
		d := decode(t, out)
		for i, s := range d.Stacks {
			fs := s.FP.Frames
			last := map[int]string{0: c.first, 1: c.second}[i]
			if len(fs) < 4 || fs[len(fs)-1].Symbol != last || s.FP.End != "final" || !strings.Contains(fmt.Sprint(s.Notes), "GUESS") {
				t.Errorf("%s: cpu %d: %q, end %q %s, notes %q", c.name, i, printedOf(s.FP), s.FP.End, s.FP.Error, s.Notes)
			}
		}
		if len(d.Stacks) != 2 {
			t.Errorf("%s: %d stacks", c.name, len(d.Stacks))
		}
	}
}
