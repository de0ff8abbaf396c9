// Command extract turns one raw kernel capture (capture.sh's console.raw and gdb.log) into the
// small files committed beside it:
//
//   - console.log: the console with every base64 blob replaced by one line (name, size, sha256);
//     the blobs themselves (core.gz, kallsyms.gz) are written, decoded, into -kcap;
//   - expected.json: every printed `Call trace:` (scenario, title, cpu, pid, comm, task state,
//     pc/lr lines of show_regs, frames as printed) and every gdb stop (breakpoint, stopped CPU,
//     registers of each CPU);
//   - kallsyms.txt.gz: the /proc/kallsyms lines the traces and an unwinder need (see keep);
//   - stops.txt: a readable register summary for the manifest.
//
// It lives under testdata so the module's packages never link it; run it with
// `go run ./testdata/kernel/extract` (capture.sh does).
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Trace is one printed `Call trace:` block.
type Trace struct {
	Scenario string   `json:"scenario"`        // @@SCENARIO marker in force: l1..l4 (sysrq-l) or t
	Stop     string   `json:"stop,omitempty"`  // the stop whose vmcore this trace was printed after
	Line     int      `json:"line"`            // 1-based line of "Call trace:" in console.log
	Title    string   `json:"title,omitempty"` // "CPU0:", "NMI backtrace for cpu 0", "task:..." line
	CPU      int      `json:"cpu"`             // from "CPU: n" or the title, -1 if not printed
	PID      int      `json:"pid"`             // from "PID: n" or "pid:n", -1 if not printed
	Comm     string   `json:"comm,omitempty"`  // task name
	State    string   `json:"state,omitempty"` // sched_show_task's state letter
	PC       string   `json:"pc,omitempty"`    // show_regs "pc : " line (6.12 IPI)
	LR       string   `json:"lr,omitempty"`    // show_regs "lr : " line
	SP       string   `json:"sp,omitempty"`    // show_regs "sp : " value
	Frames   []string `json:"frames"`          // as printed: func+0xoff/0xsize [module] or an address
	// SCS is the kernel's own shadow call stack copy printed before the trace (the
	// scs-percpu.patch kernels' show_regs: "Shadow call stack: N entries, ..."), newest first.
	SCS      []string `json:"scs,omitempty"`
	Header   string   `json:"header,omitempty"`   // the "CPU: n PID: p Comm: c ..." line
	Warnings []string `json:"warnings,omitempty"` // lines between title and trace that are not registers

	// Sources are the frames' source markers, one per frame, as kernels since 6.14 print them
	// after the frame (7.2: "C" the caller, "T" a blocked task's saved pc, "P" regs->pc across an
	// exception boundary, "" an ordinary frame record); absent where the kernel prints none.
	Sources []string `json:"sources,omitempty"`
}

// Regs is one CPU's registers at a stop, as gdb printed them (hex, PACs not stripped).
type Regs struct {
	CPU  int               `json:"cpu"`
	Regs map[string]string `json:"regs"`
}

// Stop is one breakpoint hit where a vmcore was dumped.
type Stop struct {
	Name       string `json:"name"` // l-syscall, l-ipi or t; the vmcore is NAME.vmcore
	Func       string `json:"func"` // function the hardware breakpoint was on
	Addr       string `json:"addr"` // its address
	Cond       string `json:"cond,omitempty"`
	StoppedCPU int    `json:"stopped_cpu"` // the CPU that hit the breakpoint
	// ConsoleLine is how many console lines had been written when the guest stopped: the
	// trace printed for this stop is the first one after it (for the stopped CPU; for t,
	// every task trace of that sysrq-t).
	ConsoleLine int    `json:"console_line"`
	Trace       int    `json:"trace"` // index in traces of the stopped CPU's printed trace, -1 if none
	DumpSecs    string `json:"dump_seconds"`
	CPUs        []Regs `json:"cpus"`
}

// Expected is expected.json.
type Expected struct {
	Name    string  `json:"name"`
	Family  string  `json:"family"`
	Uname   string  `json:"uname"`
	Cmdline string  `json:"cmdline"`
	Stops   []Stop  `json:"stops"`
	Traces  []Trace `json:"traces"`
}

var (
	tsRE     = regexp.MustCompile(`^\[\s*\d+\.\d+\] ?`)
	frameRE  = regexp.MustCompile(`^\s+((\S+)\+0x[0-9a-f]+/0x[0-9a-f]+(?: \[\S+\])?|0x[0-9a-f]+)(?: \(([A-Z]+)\))?$`)
	cpuHdrRE = regexp.MustCompile(`^CPU: (\d+) (?:UID: \d+ )?PID: (\d+) Comm: (\S+)`)
	taskRE   = regexp.MustCompile(`^task:(.{1,15}?)\s+state:(\S)\s.*\bpid:\s*(\d+)`)
	cpuTitle = regexp.MustCompile(`^(?:sysrq: )?CPU(\d+):$|^NMI backtrace for cpu (\d+)$`)
	regLine  = regexp.MustCompile(`^(pc|lr) : (.*)$|^sp : ([0-9a-f]+)$`)
	scsHdrRE = regexp.MustCompile(`^Shadow call stack: (\d+) entries`)
	b64RE    = regexp.MustCompile(`^[A-Za-z0-9+/=]+$`)
)

func main() {
	name := flag.String("name", "", "capture name")
	family := flag.String("family", "", "6.1 or 6.12")
	console := flag.String("console", "", "console.raw")
	gdblog := flag.String("gdblog", "", "gdb.log")
	kcap := flag.String("kcap", "", "directory for big outputs (outside git)")
	out := flag.String("out", "", "directory for committed outputs")
	vmcoreinfo := flag.String("vmcoreinfo", "", "print the VMCOREINFO note of this ELF vmcore and exit")
	flag.Parse()
	if *vmcoreinfo != "" {
		note, err := readVMCOREINFO(*vmcoreinfo)
		if err != nil {
			log.Fatal(err)
		}
		os.Stdout.Write(note)
		return
	}
	raw, err := os.ReadFile(*console)
	if err != nil {
		log.Fatal(err)
	}
	exp := Expected{Name: *name, Family: *family}
	clean, blobs := splitBlobs(strings.ReplaceAll(string(raw), "\r", ""))
	for bn, data := range blobs {
		if err := os.WriteFile(filepath.Join(*kcap, bn), data, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(*out, "console.log"), []byte(clean), 0o644); err != nil {
		log.Fatal(err)
	}
	exp.Traces = parseTraces(clean, &exp)
	g, err := os.ReadFile(*gdblog)
	if err != nil {
		log.Fatal(err)
	}
	exp.Stops = parseGDB(string(g))
	link(&exp)

	syms, err := readKallsyms(blobs["kallsyms.gz"])
	if err != nil {
		log.Fatal(err)
	}
	kept := keep(syms, &exp)
	var kb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&kb, gzip.BestCompression)
	for _, s := range kept {
		fmt.Fprintln(zw, s.line)
	}
	zw.Close()
	if err := os.WriteFile(filepath.Join(*out, "kallsyms.txt.gz"), kb.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	j, _ := json.MarshalIndent(exp, "", "\t")
	if err := os.WriteFile(filepath.Join(*out, "expected.json"), append(j, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "stops.txt"), []byte(summary(&exp, syms)), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("extract: %d traces, %d stops, %d of %d symbols kept (%d bytes gz)\n",
		len(exp.Traces), len(exp.Stops), len(kept), len(syms), kb.Len())
}

// splitBlobs cuts the "@@BEGIN name ...", base64 lines, "@@END name" blocks out of the console
// and decodes them. Lines inside a block that are not base64 (a kernel message printed in the
// middle) are kept in the console and skipped by the decoder.
func splitBlobs(s string) (string, map[string][]byte) {
	blobs := map[string][]byte{}
	var out strings.Builder
	var cur string
	var extra string
	var b64 strings.Builder
	for _, ln := range strings.Split(s, "\n") {
		switch {
		case cur == "" && strings.HasPrefix(ln, "@@BEGIN "):
			f := strings.Fields(ln)
			cur = f[1]
			extra = strings.Join(f[2:], " ")
			b64.Reset()
		case cur != "" && ln == "@@END "+cur:
			data, err := base64.StdEncoding.DecodeString(b64.String())
			if err != nil {
				log.Fatalf("blob %s: %v", cur, err)
			}
			blobs[cur] = data
			sum := sha256.Sum256(data)
			fmt.Fprintf(&out, "@@BLOB %s %s: %d bytes, sha256 %x (decoded by extract, kept outside git)\n",
				cur, extra, len(data), sum)
			cur = ""
		case cur != "" && b64RE.MatchString(ln):
			b64.WriteString(ln)
		default:
			out.WriteString(ln)
			out.WriteString("\n")
		}
	}
	return strings.TrimRight(out.String(), "\n") + "\n", blobs
}

func parseTraces(s string, exp *Expected) []Trace {
	lines := strings.Split(s, "\n")
	var traces []Trace
	scenario := ""
	ctx := Trace{CPU: -1, PID: -1}
	for i := 0; i < len(lines); i++ {
		raw := lines[i]
		if strings.HasPrefix(raw, "@@UNAME ") {
			exp.Uname = strings.TrimPrefix(raw, "@@UNAME ")
		}
		if strings.HasPrefix(raw, "@@CMDLINE ") {
			exp.Cmdline = strings.TrimPrefix(raw, "@@CMDLINE ")
		}
		if strings.HasPrefix(raw, "@@SCENARIO ") {
			scenario = strings.TrimPrefix(raw, "@@SCENARIO ")
			ctx = Trace{CPU: -1, PID: -1}
			continue
		}
		ln := tsRE.ReplaceAllString(raw, "")
		if m := cpuTitle.FindStringSubmatch(ln); m != nil {
			ctx = Trace{CPU: -1, PID: -1, Title: ln}
			ctx.CPU = atoi(m[1] + m[2])
			continue
		}
		if m := taskRE.FindStringSubmatch(ln); m != nil {
			ctx = Trace{CPU: -1, PID: -1, Title: ln}
			ctx.Comm = strings.TrimSpace(m[1])
			ctx.State = m[2]
			ctx.PID = atoi(m[3])
			continue
		}
		if m := cpuHdrRE.FindStringSubmatch(ln); m != nil {
			ctx.Header = ln
			ctx.CPU = atoi(m[1])
			ctx.PID = atoi(m[2])
			ctx.Comm = m[3]
			continue
		}
		if m := regLine.FindStringSubmatch(ln); m != nil {
			switch {
			case m[1] == "pc":
				ctx.PC = m[2]
			case m[1] == "lr":
				ctx.LR = m[2]
			default:
				ctx.SP = m[3]
			}
			continue
		}
		if m := scsHdrRE.FindStringSubmatch(ln); m != nil {
			ctx.SCS = []string{}
			for len(ctx.SCS) < atoi(m[1]) && i+1 < len(lines) {
				f := frameRE.FindStringSubmatch(tsRE.ReplaceAllString(lines[i+1], ""))
				if f == nil {
					break
				}
				ctx.SCS = append(ctx.SCS, f[1])
				i++
			}
			if len(ctx.SCS) != atoi(m[1]) {
				// Kept as far as parsed: the checks compare entry for entry.
				log.Printf("console line %d: %q, but %d entries follow", i+1, ln, len(ctx.SCS))
			}
			continue
		}
		if ln != "Call trace:" {
			continue
		}
		t := ctx
		t.Scenario = scenario
		t.Line = i + 1
		t.Frames = []string{}
		for i+1 < len(lines) {
			m := frameRE.FindStringSubmatch(tsRE.ReplaceAllString(lines[i+1], ""))
			if m == nil {
				break
			}
			t.Frames = append(t.Frames, m[1])
			t.Sources = append(t.Sources, m[3])
			i++
		}
		if strings.Join(t.Sources, "") == "" {
			t.Sources = nil // a kernel that prints no source markers
		}
		traces = append(traces, t)
		ctx = Trace{CPU: -1, PID: -1}
	}
	return traces
}

// link ties each stop to the traces printed for it: for l-syscall and l-ipi the first trace
// after the stop's console position on the stopped CPU; for t every task trace of the
// sysrq-t section that follows, and as the stop's own trace the running writer (sh, state R).
func link(exp *Expected) {
	for si := range exp.Stops {
		st := &exp.Stops[si]
		if st.ConsoleLine == 0 {
			continue
		}
		sec := ""
		for ti := range exp.Traces {
			t := &exp.Traces[ti]
			if t.Line <= st.ConsoleLine {
				continue
			}
			if st.Name == "t" {
				if sec == "" {
					sec = t.Scenario
				}
				if t.Scenario == sec && strings.HasPrefix(t.Title, "task:") {
					t.Stop = st.Name
					if st.Trace < 0 && t.State == "R" && t.Comm == "sh" {
						st.Trace = ti
					}
				}
				continue
			}
			if t.CPU == st.StoppedCPU && st.Trace < 0 {
				st.Trace = ti
				t.Stop = st.Name
			}
		}
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

var (
	stopRE   = regexp.MustCompile(`^@@STOP (\S+) (\S+) (0x[0-9a-f]+)(?: if (.*))?$`)
	curThrRE = regexp.MustCompile(`^\*\s+\d+\s+Thread \d+\.\d+ \(CPU#(\d+)`)
	thrRE    = regexp.MustCompile(`^Thread \d+ \(Thread \d+\.\d+ \(CPU#(\d+)`)
	gregRE   = regexp.MustCompile(`^([a-z][a-z0-9_]*|[A-Z][A-Z0-9_]*)\s+(0x[0-9a-f]+)`)
)

func parseGDB(s string) []Stop {
	var stops []Stop
	var cur *Stop
	var regs *Regs
	var t0 float64
	for _, ln := range strings.Split(s, "\n") {
		if m := stopRE.FindStringSubmatch(ln); m != nil {
			stops = append(stops, Stop{Name: m[1], Func: m[2], Addr: m[3], Cond: m[4], StoppedCPU: -1, Trace: -1})
			cur = &stops[len(stops)-1]
			regs = nil
			continue
		}
		if cur == nil {
			continue
		}
		if strings.HasPrefix(ln, "@@TIME ") {
			t0, _ = strconv.ParseFloat(strings.TrimPrefix(ln, "@@TIME "), 64)
		}
		if strings.HasPrefix(ln, "@@CONSOLE-LINES ") {
			cur.ConsoleLine = atoi(strings.TrimPrefix(ln, "@@CONSOLE-LINES "))
		}
		if strings.HasPrefix(ln, "@@DUMPED ") {
			t1, _ := strconv.ParseFloat(strings.TrimPrefix(ln, "@@DUMPED "), 64)
			cur.DumpSecs = fmt.Sprintf("%.1f", t1-t0)
		}
		if m := curThrRE.FindStringSubmatch(ln); m != nil {
			cur.StoppedCPU = atoi(m[1])
		}
		if m := thrRE.FindStringSubmatch(ln); m != nil {
			cur.CPUs = append(cur.CPUs, Regs{CPU: atoi(m[1]), Regs: map[string]string{}})
			regs = &cur.CPUs[len(cur.CPUs)-1]
			continue
		}
		if m := gregRE.FindStringSubmatch(ln); m != nil && regs != nil && keepReg(m[1]) {
			regs.Regs[m[1]] = m[2]
		}
	}
	for i := range stops {
		sort.Slice(stops[i].CPUs, func(a, b int) bool { return stops[i].CPUs[a].CPU < stops[i].CPUs[b].CPU })
	}
	return stops
}

// keepReg says which registers go into expected.json: the general ones and the system
// registers an unwinder over the dump can use (current task in SP_EL0, per-CPU offset in
// TPIDR_EL1, page tables, exception state, the PAC keys); gdb.log.gz has them all.
func keepReg(r string) bool {
	if r[0] >= 'a' && r[0] <= 'z' {
		return !strings.HasPrefix(r, "v") && !strings.HasPrefix(r, "z") && !strings.HasPrefix(r, "p") ||
			r == "pc" || r == "pauth_dmask" || r == "pauth_cmask"
	}
	switch r {
	case "SP_EL0", "SP_EL1", "TPIDR_EL1", "TPIDR_EL0", "TTBR0_EL1", "TTBR1_EL1", "TCR_EL1",
		"ELR_EL1", "ESR_EL1", "FAR_EL1", "SPSR_EL1", "SCTLR_EL1", "VBAR", "CONTEXTIDR_EL1",
		"APIAKEYLO_EL1", "APIAKEYHI_EL1", "APIBKEYLO_EL1", "APIBKEYHI_EL1", "MPIDR_EL1":
		return true
	}
	return false
}

type sym struct {
	addr uint64
	typ  string
	name string
	line string
}

func readKallsyms(gz []byte) ([]sym, error) {
	if gz == nil {
		return nil, fmt.Errorf("no kallsyms.gz blob in the console")
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	var syms []sym
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		syms = append(syms, sym{a, f[1], f[2], sc.Text()})
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	return syms, sc.Err()
}

// lookup returns the index of the text symbol containing addr, or -1.
func lookup(syms []sym, addr uint64) int {
	i := sort.Search(len(syms), func(i int) bool { return syms[i].addr > addr }) - 1
	for ; i >= 0; i-- {
		if strings.ContainsAny(syms[i].typ, "tTwW") {
			return i
		}
	}
	return -1
}

// strip removes a kernel PAC: kernel text addresses have bits 63:48 all set.
func strip(v uint64) uint64 {
	if v>>55&1 == 1 {
		return v | 0xffff000000000000
	}
	return v
}

// Symbols every kernel unwinder over a vmcore needs besides the ones in the traces: the
// image bounds, stacks and per-CPU data, task lists, entry code, page tables, BTF, kallsyms.
var fixed = []string{
	"_text", "_stext", "_etext", "_sdata", "_edata", "_end", "__init_begin", "__init_end",
	"swapper_pg_dir", "idmap_pg_dir", "init_pg_dir", "init_task", "init_thread_union",
	"init_stack", "init_shadow_call_stack", "__per_cpu_offset", "__per_cpu_start",
	"__per_cpu_end", "__per_cpu_load", "irq_stack_ptr", "irq_shadow_call_stack_ptr",
	"overflow_stack", "sdei_stack_normal_ptr", "sdei_stack_critical_ptr",
	"sdei_shadow_call_stack_normal_ptr", "sdei_shadow_call_stack_critical_ptr", "runqueues",
	"irq_shadow_call_stack_saved_ptr", "sdei_shadow_call_stack_normal_saved_ptr",
	"sdei_shadow_call_stack_critical_saved_ptr", "__sdei_asm_handler", "dynamic_scs_enabled",
	"cpu_number", "current_task", "__entry_task", "kimage_voffset", "memstart_addr",
	"vabits_actual", "physvirt_offset", "vmemmap", "__start_BTF", "__stop_BTF", "vmcoreinfo_data",
	"vmcoreinfo_note", "kallsyms_names", "kallsyms_offsets", "kallsyms_relative_base",
	"kallsyms_num_syms", "kallsyms_token_table", "kallsyms_token_index", "kallsyms_markers",
	"kallsyms_seqs_of_names", "vectors", "call_on_irq_stack", "cpu_switch_to", "ret_from_fork",
	"__switch_to", "__schedule", "schedule", "do_interrupt_handler", "ret_to_user",
	"__bad_stack", "handle_bad_stack", "panic", "cpu_in_idle", "default_idle_call",
	"cpu_do_idle", "arch_cpu_idle", "do_idle", "cpu_startup_entry", "secondary_start_kernel",
	"__secondary_switched", "rest_init", "start_kernel", "__primary_switched", "kthread",
	"smpboot_thread_fn", "worker_thread", "ret_from_fork_asm",
}

var fixedPrefix = []string{"el0t_", "el1h_", "el1t_", "el0_", "el1_", "__el0_", "__el1_"}

func keep(syms []sym, exp *Expected) []sym {
	want := map[string]bool{}
	for _, n := range fixed {
		want[n] = true
	}
	add := func(s string) {
		if i := strings.IndexByte(s, '+'); i > 0 {
			want[s[:i]] = true
		}
	}
	for _, t := range exp.Traces {
		for _, f := range t.Frames {
			add(f)
		}
		for _, f := range t.SCS {
			add(f)
		}
		add(t.PC)
		add(t.LR)
	}
	sel := map[int]bool{}
	for _, st := range exp.Stops {
		for _, c := range st.CPUs {
			for _, r := range []string{"pc", "x30"} {
				v, err := strconv.ParseUint(strings.TrimPrefix(c.Regs[r], "0x"), 16, 64)
				if err == nil {
					if i := lookup(syms, strip(v)); i >= 0 {
						sel[i] = true
					}
				}
			}
		}
	}
	for i, s := range syms {
		if want[s.name] {
			sel[i] = true
		}
		for _, p := range fixedPrefix {
			if strings.HasPrefix(s.name, p) && strings.ContainsAny(s.typ, "tT") {
				sel[i] = true
			}
		}
	}
	// The next symbol at a higher address gives each kept function its size (taken from the
	// selection above only, so it does not cascade).
	var next []int
	for i := range syms {
		if !sel[i] || !strings.ContainsAny(syms[i].typ, "tTwW") {
			continue
		}
		for j := i + 1; j < len(syms); j++ {
			if syms[j].addr > syms[i].addr {
				next = append(next, j)
				break
			}
		}
	}
	for _, j := range next {
		sel[j] = true
	}
	var kept []sym
	for i, s := range syms {
		if sel[i] {
			kept = append(kept, s)
		}
	}
	return kept
}

func summary(exp *Expected, syms []sym) string {
	var b strings.Builder
	symof := func(h string) string {
		v, err := strconv.ParseUint(strings.TrimPrefix(h, "0x"), 16, 64)
		if err != nil {
			return "?"
		}
		sv := strip(v)
		i := lookup(syms, sv)
		if i < 0 {
			return "?"
		}
		s := fmt.Sprintf("%s+%#x", syms[i].name, sv-syms[i].addr)
		if sv != v {
			s = fmt.Sprintf("%#x = %s", sv, s)
		}
		return s
	}
	for _, st := range exp.Stops {
		cond := ""
		if st.Cond != "" {
			cond = " if " + st.Cond
		}
		fmt.Fprintf(&b, "stop %s: hbreak %s (%s)%s; stopped CPU %d at console line %d; dumped %s.vmcore in %s s; its printed trace: %d\n",
			st.Name, st.Func, st.Addr, cond, st.StoppedCPU, st.ConsoleLine, st.Name, st.DumpSecs, st.Trace)
		for _, c := range st.CPUs {
			mark := " "
			if c.CPU == st.StoppedCPU {
				mark = "*"
			}
			r := c.Regs
			fmt.Fprintf(&b, "  %scpu%d pc=%s (%s) x30=%s (%s) sp=%s x29=%s x18=%s cpsr=%s x0=%s\n",
				mark, c.CPU, r["pc"], symof(r["pc"]), r["x30"], symof(r["x30"]), r["sp"], r["x29"],
				r["x18"], r["cpsr"], r["x0"])
		}
	}
	for i, t := range exp.Traces {
		first := ""
		if len(t.Frames) > 0 {
			first = t.Frames[0]
		}
		if t.Scenario != "t" || t.State == "R" {
			fmt.Fprintf(&b, "trace %d (scenario %s, line %d, stop %q): %s cpu=%d pid=%d comm=%s: %d frames, first %s\n",
				i, t.Scenario, t.Line, t.Stop, t.Title, t.CPU, t.PID, t.Comm, len(t.Frames), first)
		}
	}
	n := 0
	for _, t := range exp.Traces {
		if t.Scenario == "t" && t.Stop == "t" {
			n++
		}
	}
	fmt.Fprintf(&b, "sysrq-t traces: %d\n", n)
	return b.String()
}

// readVMCOREINFO returns the descriptor of the "VMCOREINFO" note in the PT_NOTE segments of an
// ELF vmcore (what QEMU's dump-guest-memory copies from the guest's fw_cfg entry).
func readVMCOREINFO(path string) ([]byte, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return nil, fmt.Errorf("%s: PT_NOTE at %#x: %v", path, p.Off, err)
		}
		for len(b) >= 12 {
			namesz := binary.LittleEndian.Uint32(b[0:])
			descsz := binary.LittleEndian.Uint32(b[4:])
			nameEnd := 12 + (uint64(namesz)+3)&^3
			descEnd := nameEnd + (uint64(descsz)+3)&^3
			if descEnd > uint64(len(b)) {
				break
			}
			name := strings.TrimRight(string(b[12:12+namesz]), "\x00")
			if name == "VMCOREINFO" {
				return b[nameEnd : nameEnd+uint64(descsz)], nil
			}
			b = b[descEnd:]
		}
	}
	return nil, fmt.Errorf("%s: no VMCOREINFO note", path)
}
