// Package kcapture reads this repository's kernel capture fixtures
// (testdata/kernel/NAME, described in testdata/kernel/README.md): a
// capture's expected.json (the stops where vmcores were dumped and every
// trace the kernel printed), its symbols and its trimmed vmcores, and
// matches walks against the printed traces. Only the module's tests and
// tools (examples/unwinddump's capture mode, testdata/kernel/trim) use
// it; a crash-dump program opens its dump with vmcore.Load and
// kernel.New.
package kcapture

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// Expected is a capture's expected.json (testdata/kernel/README.md): the
// stops where vmcores were dumped and every trace the kernel printed.
type Expected struct {
	// Name is the capture's name, Uname the guest's uname -a.
	Name  string `json:"name"`
	Uname string `json:"uname"`
	// Stops are the breakpoint hits, Traces every printed trace in
	// console order.
	Stops  []Stop  `json:"stops"`
	Traces []Trace `json:"traces"`
}

// Stop is one breakpoint hit where a vmcore NAME.vmcore was dumped.
type Stop struct {
	// Name is the stop's name (l-syscall, l-ipi, t).
	Name string `json:"name"`
	// Func is the function the breakpoint was on.
	Func string `json:"func"`
	// StoppedCPU is the CPU that hit the breakpoint.
	StoppedCPU int `json:"stopped_cpu"`
	// Trace is the index in Traces of the stopped CPU's printed trace,
	// -1 if none.
	Trace int `json:"trace"`
	// CPUs are the registers of each CPU at the stop.
	CPUs []StopRegs `json:"cpus"`
}

// StopRegs are one CPU's registers at a stop as gdb printed them (hex).
type StopRegs struct {
	// CPU is the CPU's index; Regs maps register names to hex values.
	CPU  int               `json:"cpu"`
	Regs map[string]string `json:"regs"`
}

// Trace is one printed `Call trace:`, frames as printed, innermost first.
type Trace struct {
	// Scenario is the console marker in force (l1..l4, t); Stop the
	// stop it belongs to; Title the line that introduced it; CPU, PID,
	// Comm and State what it printed about the CPU or task (-1: not
	// printed).
	Scenario string `json:"scenario"`
	Stop     string `json:"stop"`
	Title    string `json:"title"`
	CPU      int    `json:"cpu"`
	PID      int    `json:"pid"`
	Comm     string `json:"comm"`
	State    string `json:"state"`
	// Frames are the frames as printed, innermost first.
	Frames []string `json:"frames"`
	// Sources are the source markers the kernel printed after each frame
	// (kernels since 6.14: "C" the caller, "T" a blocked task's saved pc,
	// "P" regs->pc, "" an ordinary frame record), nil when it printed
	// none.
	Sources []string `json:"sources"`
	// SCS is the shadow call stack copy the kernel printed before the
	// trace (scs-percpu.patch's show_regs, arch_stack_walk_shadow), as
	// printed, newest first; nil where none was printed.
	SCS []string `json:"scs"`
}

// maxExpected bounds expected.json.
const maxExpected = 16 << 20

// ParseExpected parses expected.json and checks its references.
func ParseExpected(b []byte) (*Expected, error) {
	if len(b) > maxExpected {
		return nil, fmt.Errorf("expected.json: %d bytes (limit %d)", len(b), maxExpected)
	}
	var e Expected
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("expected.json: %w", err)
	}
	for i, s := range e.Stops {
		if s.Trace < -1 || s.Trace >= len(e.Traces) {
			return nil, fmt.Errorf("expected.json: stop %d (%s): trace %d outside [-1, %d)", i, s.Name, s.Trace, len(e.Traces))
		}
		if s.Name == "" || strings.ContainsAny(s.Name, `/\`) || s.Name[0] == '.' {
			return nil, fmt.Errorf("expected.json: stop %d: bad name %q", i, s.Name)
		}
	}
	for i, t := range e.Traces {
		if t.Sources != nil && len(t.Sources) != len(t.Frames) {
			return nil, fmt.Errorf("expected.json: trace %d: %d sources for %d frames", i, len(t.Sources), len(t.Frames))
		}
	}
	return &e, nil
}

// SPEL0 returns the stop's SP_EL0 (the current task) of each CPU as gdb
// printed it, 0 where missing.
func (s *Stop) SPEL0() []uint64 {
	var out []uint64
	for _, c := range s.CPUs {
		if c.CPU < 0 || c.CPU >= 4096 {
			continue
		}
		for len(out) <= c.CPU {
			out = append(out, 0)
		}
		v, err := strconv.ParseUint(strings.TrimPrefix(c.Regs["SP_EL0"], "0x"), 16, 64)
		if err == nil {
			out[c.CPU] = v
		}
	}
	return out
}

// PrintingCode are the functions of the kernel's trace-printing paths
// (lib/dump_stack.c, arch/arm64/kernel/stacktrace.c, lib/nmi_backtrace.c,
// drivers/tty/sysrq.c, kernel/sched/core.c): a printed trace is compared
// from its first frame outside them, since the dump was taken before they
// ran.
var PrintingCode = map[string]bool{
	"dump_backtrace": true, "show_stack": true, "dump_stack_lvl": true, "dump_stack": true,
	"__dump_stack":      true, // lib/dump_stack.c, out of line in scs-7.2 (clang 21)
	"nmi_cpu_backtrace": true, "show_regs": true, "__show_regs": true, "showacpu": true,
	"sched_show_task": true, "arch_stack_walk": true, "kunwind_stack_walk": true,
	// scs-percpu.patch's printed shadow call stack copy (show_regs).
	"show_shadow_call_stack": true, "arch_stack_walk_shadow": true,
}

// FuncOf returns the function name of a frame printed as func+0xoff/0xsize.
func FuncOf(frame string) string {
	f, _, _ := strings.Cut(frame, "+")
	return f
}

// PrintedFrom returns the index of the first printed frame outside
// PrintingCode.
func PrintedFrom(printed []string) int {
	p := 0
	for p < len(printed) && PrintingCode[FuncOf(printed[p])] {
		p++
	}
	return p
}

// MatchPrinted checks that walk (frames formatted as the kernel prints
// them) ends with the printed trace from its first frame outside the
// printing code, frame by frame. It returns the index in walk where the
// match starts, or an error naming the first difference.
func MatchPrinted(walk, printed []string) (int, error) {
	p := PrintedFrom(printed)
	want := printed[p:]
	if len(want) == 0 {
		return 0, fmt.Errorf("the printed trace has no frame outside the printing code")
	}
	at := len(walk) - len(want)
	if at < 0 {
		return 0, fmt.Errorf("the walk has %d frames, the printed trace %d from frame %d (%s)", len(walk), len(want), p, want[0])
	}
	for i := len(want) - 1; i >= 0; i-- {
		if walk[at+i] != want[i] {
			return at, fmt.Errorf("printed frame %d %s, walk frame %d %s", p+i, want[i], at+i, walk[at+i])
		}
	}
	return at, nil
}

// Capture is one shipped capture directory: expected.json, syms.txt.gz
// and the trimmed vmcores STOP.vmcore.gz.
type Capture struct {
	// Dir is the capture's directory.
	Dir string
	// Expected is its expected.json.
	Expected *Expected
	// Syms are its symbols.
	Syms []vmcore.KSym

	btf      *vmcore.BTF
	btfBuild string
}

// A vmcore is decompressed into memory up to maxVmcore, and up to
// vmcoreBudget plus vmcoreRatio bytes per compressed byte: deflate expands
// up to 1,032 times, and the shipped trimmed vmcores expand at most 12
// times. The bound is checked while inflating, before the buffer (of the
// exact size) is allocated.
const (
	maxVmcore    = 256 << 20
	vmcoreBudget = 64 << 20
	vmcoreRatio  = 32
)

// maxSyms bounds a decompressed symbol list.
const maxSyms = 64 << 20

// OpenCapture reads dir's expected.json and symbols (syms.txt.gz, or
// kallsyms.txt.gz when there is none).
func OpenCapture(dir string) (*Capture, error) {
	b, err := readLimited(filepath.Join(dir, "expected.json"), maxExpected)
	if err != nil {
		return nil, err
	}
	e, err := ParseExpected(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	c := &Capture{Dir: dir, Expected: e}
	sp := filepath.Join(dir, "syms.txt.gz")
	if _, err := os.Stat(sp); err != nil {
		sp = filepath.Join(dir, "kallsyms.txt.gz")
	}
	sb, err := readGzip(sp, maxSyms, 0)
	if err != nil {
		return nil, err
	}
	if c.Syms, err = vmcore.ParseKallsyms(bytes.NewReader(sb)); err != nil {
		return nil, fmt.Errorf("%s: %w", sp, err)
	}
	dp := filepath.Join(dir, "datasyms.txt.gz")
	if _, err := os.Stat(dp); err == nil {
		db, err := readGzip(dp, maxSyms, 0)
		if err != nil {
			return nil, err
		}
		ds, err := vmcore.ParseKallsyms(bytes.NewReader(db))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dp, err)
		}
		c.Syms = kernel.MergeDataSyms(c.Syms, ds)
	}
	return c, nil
}

// Vmcore opens the trimmed vmcore of stop (STOP.vmcore.gz) in memory.
func (c *Capture) Vmcore(stop string) (*vmcore.Vmcore, error) {
	p := filepath.Join(c.Dir, stop+".vmcore.gz")
	b, err := readGzip(p, maxVmcore, vmcoreRatio)
	if err != nil {
		return nil, err
	}
	return vmcore.Load(p, bytes.NewReader(b), int64(len(b)))
}

// Kernel opens stop's vmcore and prepares it, with the stop's SP_EL0 as
// the current tasks for kernels without __entry_task among the symbols.
// The BTF is shipped once per capture, in the first stop's vmcore: the
// other stops (the same boot) use it.
func (c *Capture) Kernel(s *Stop) (*kernel.Kernel, error) {
	v, err := c.Vmcore(s.Name)
	if err != nil {
		return nil, err
	}
	opts := kernel.Options{Current: s.SPEL0()}
	if len(c.Expected.Stops) == 0 {
		return nil, fmt.Errorf("%s: expected.json: no stops (the first stop's vmcore holds the BTF)", c.Dir)
	}
	if first := &c.Expected.Stops[0]; first.Name != s.Name {
		if c.btf == nil {
			k0, err := c.Kernel(first)
			if err != nil {
				return nil, err
			}
			if k0.BTF == nil {
				return nil, fmt.Errorf("%s: %s.vmcore.gz holds no BTF", c.Dir, first.Name)
			}
			c.btf, c.btfBuild = k0.BTF, k0.Build()
		}
		opts.BTF, opts.BTFFrom, opts.BTFBuild = c.btf, first.Name+".vmcore.gz", c.btfBuild
	}
	return kernel.New(v, c.Syms, opts)
}

// Strings formats frames as the kernel prints them ([kernel.Kernel.Format]).
func Strings(k *kernel.Kernel, fs []unwind.Frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = k.Format(f.PC)
	}
	return out
}

// readLimited reads the file at path, failing before reading more than
// limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes", path, limit)
	}
	return b, nil
}

// readGzip decompresses the gzip file at path into memory: at most limit
// bytes and, with a ratio, at most vmcoreBudget + ratio × the compressed
// size. It inflates twice, first to count (the bound is checked while
// inflating), then into a buffer of the exact size, so that a gzip bomb
// costs the bound's time and no memory but the inflater's.
func readGzip(path string, limit, ratio int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if ratio > 0 {
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		limit = min(limit, vmcoreBudget+ratio*st.Size())
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	n, err := io.Copy(io.Discard, io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: offset %d decompressed: %w", path, n, err)
	}
	if n > limit {
		return nil, fmt.Errorf("%s: more than %d bytes decompressed", path, limit)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := zr.Reset(f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(zr, b); err != nil {
		return nil, fmt.Errorf("%s: changed while read: %w", path, err)
	}
	if m, _ := io.Copy(io.Discard, io.LimitReader(zr, 1)); m != 0 {
		return nil, fmt.Errorf("%s: changed while read: longer than %d bytes decompressed", path, n)
	}
	return b, nil
}

// PrintedAddrs returns the addresses of every frame of every printed
// trace and printed shadow call stack copy (func+0xoff/0xsize: the
// function's symbol plus off; among symbols of the same name the one of
// that size), sorted, each once: the return addresses the kernel printed
// (the stopped functions' own frames too, which are return addresses into
// them as well). A frame that names no symbol of that name and size is an
// error; frames printed as bare addresses, and frames in a data symbol
// (the kernel's racy unwind of a running task can print a stack or heap
// word as a frame), are skipped.
func (c *Capture) PrintedAddrs() ([]uint64, error) {
	type key struct {
		name string
		size uint64
	}
	at := map[key]uint64{}
	text := map[key]bool{}
	for _, s := range c.Syms {
		if _, dup := at[key{s.Name, s.Size}]; !dup {
			at[key{s.Name, s.Size}] = s.Addr
			text[key{s.Name, s.Size}] = strings.IndexByte("tTwW", s.Type) >= 0
		}
	}
	seen := map[uint64]bool{}
	var out []uint64
	for _, t := range c.Expected.Traces {
		for _, f := range append(append([]string(nil), t.Frames...), t.SCS...) {
			name, rest, ok := strings.Cut(strings.Fields(f)[0], "+")
			if !ok {
				continue
			}
			offs, sizes, _ := strings.Cut(rest, "/")
			off, err1 := strconv.ParseUint(offs, 0, 64)
			size, err2 := strconv.ParseUint(sizes, 0, 64)
			a, found := at[key{name, size}]
			if err1 != nil || err2 != nil || !found {
				return nil, fmt.Errorf("%s: printed frame %q: no symbol %s of size %#x", c.Dir, f, name, size)
			}
			if !text[key{name, size}] {
				continue
			}
			if !seen[a+off] {
				seen[a+off] = true
				out = append(out, a+off)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
