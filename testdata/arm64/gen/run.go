package main

import (
	"bufio"
	"debug/elf"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// gdbcapture.py runs inside gdb-multiarch at the capture point.
//
//go:embed gdbcapture.py
var gdbScript string

// gdbFrame is one frame of gdb's backtrace at the capture point.
type gdbFrame struct {
	PC   hexU64 `json:"pc"`
	Func string `json:"func"`
	// Type is gdb's frame type: "normal", "inline", "sigtramp", ...
	Type string `json:"type"`
	// LR is x30 as gdb unwinds it for this frame (in the frame after a
	// signal trampoline: the interrupted x30).
	LR hexU64 `json:"lr"`
}

// gdbRef is gdb's view of the capture point, kept in the snapshot (the
// loader ignores it) for the comparison tests.
type gdbRef struct {
	Version   string     `json:"version"`
	Backtrace []gdbFrame `json:"backtrace"`
}

// captured is what gdbcapture.py writes.
type captured struct {
	Regs    map[string]uint64 `json:"regs"`
	SCSBase uint64            `json:"scs_base"`
	Stack   struct {
		Base uint64 `json:"base"`
		Hex  string `json:"hex"`
	} `json:"stack"`
	SCS struct {
		Base uint64 `json:"base"`
		Hex  string `json:"hex"`
	} `json:"scs"`
	Main      uint64 `json:"main"`
	Libs      string `json:"libs"`
	GDB       string `json:"gdb_version"`
	Backtrace []struct {
		PC   uint64 `json:"pc"`
		Func string `json:"func"`
		Type string `json:"type"`
		LR   uint64 `json:"lr"`
	} `json:"bt"`
}

// runConfig holds the flags of the run mode.
type runConfig struct {
	prog, args, brk, scsExpr, cpu, sysroot, expect, out, binName, note string
	hit                                                                int
	finish                                                             bool
	stackMax                                                           uint64
}

// capture runs the program under qemu-aarch64 -g, stops it with
// gdb-multiarch at the capture point and returns what the gdb script
// recorded.
func capture(c runConfig) (*captured, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gen-run")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "capture.py")
	outJSON := filepath.Join(dir, "out.json")
	if err := os.WriteFile(script, []byte(gdbScript), 0o644); err != nil {
		return nil, err
	}
	prog, err := filepath.Abs(c.prog)
	if err != nil {
		return nil, err
	}
	// The program runs from its directory, as ./NAME, with an empty
	// environment, host ASLR off and QEMU's random numbers fixed (-seed 1:
	// AT_RANDOM, the stack canary): its stack contents and so the
	// capture are the same wherever it is.
	qargs := []string{"-R", "qemu-aarch64", "-seed", "1", "-L", c.sysroot}
	if c.cpu != "" {
		qargs = append(qargs, "-cpu", c.cpu)
	}
	qargs = append(qargs, "-g", strconv.Itoa(port), "./"+filepath.Base(prog))
	qargs = append(qargs, strings.Fields(c.args)...)
	q := exec.Command("setarch", qargs...)
	q.Dir, q.Env = filepath.Dir(prog), []string{}
	q.Stdout, q.Stderr = os.Stderr, os.Stderr
	if err := q.Start(); err != nil {
		return nil, fmt.Errorf("qemu-aarch64: %w", err)
	}
	defer func() {
		q.Process.Kill()
		q.Wait()
	}()
	gargs := []string{"-batch", "-nx",
		"-ex", "set sysroot " + c.sysroot,
		"-ex", "set backtrace past-main on",
		"-ex", "set pagination off",
		// QEMU's stub takes one connection: gdb retries until it listens.
		"-ex", "set tcp auto-retry on",
		"-ex", "set tcp connect-timeout 20",
		"-ex", "file " + prog,
		"-ex", "target remote :" + strconv.Itoa(port),
	}
	for _, sig := range []string{"SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD"} {
		gargs = append(gargs, "-ex", "handle "+sig+" nostop noprint pass")
	}
	gargs = append(gargs, "-ex", "break "+c.brk)
	for range c.hit {
		gargs = append(gargs, "-ex", "continue")
	}
	if c.finish {
		// Capture in the caller, right after the call returned: its
		// frame record and SCS push are in place whatever its prologue.
		gargs = append(gargs, "-ex", "finish")
	}
	gargs = append(gargs,
		"-ex", "python CAPTURE_OUT = "+strconv.Quote(outJSON),
		"-ex", "python SCS_BASE_EXPR = "+strconv.Quote(c.scsExpr),
		"-ex", fmt.Sprintf("python STACK_MAX = %d", c.stackMax),
		"-x", script,
		"-ex", "kill")
	g := exec.Command("gdb-multiarch", gargs...)
	logb, err := g.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("gdb-multiarch: %v\n%s", err, logb)
	}
	raw, err := os.ReadFile(outJSON)
	if err != nil {
		return nil, fmt.Errorf("gdb script wrote nothing (did the program reach %q?):\n%s", c.brk, logb)
	}
	var cp captured
	if err := json.Unmarshal(raw, &cp); err != nil {
		return nil, err
	}
	return &cp, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// funcSymbols returns the function symbols (STT_FUNC, STT_GNU_IFUNC) of
// .symtab and .dynsym, each (name, address) once, moved by bias.
func funcSymbols(path string, bias uint64) ([]symbol, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type key struct {
		name string
		addr uint64
	}
	seen := map[key]bool{}
	var out []symbol
	for _, read := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, s := range syms {
			t := elf.ST_TYPE(s.Info)
			if t != elf.STT_FUNC && t != elf.STT_LOOS || s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			if k := (key{s.Name, s.Value}); !seen[k] {
				seen[k] = true
				out = append(out, symbol{Name: s.Name, Addr: hexU64(s.Value + bias), Size: s.Size})
			}
		}
	}
	return out, nil
}

// symbolValue returns the value of the function symbol name in path.
func symbolValue(path, name string) (uint64, error) {
	syms, err := funcSymbols(path, 0)
	if err != nil {
		return 0, err
	}
	for _, s := range syms {
		if s.Name == name {
			return uint64(s.Addr), nil
		}
	}
	return 0, fmt.Errorf("%s: no function %s", path, name)
}

// libLine is one line of gdb's "info sharedlibrary": the runtime start of
// the library's .text and its path.
var libLine = regexp.MustCompile(`^(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+\S+(?: \(\*\))?\s+(/\S+)$`)

// libSymbols returns the symbols of every shared library gdb listed, moved
// by its load bias: the runtime start of .text minus .text's address in
// the file.
func libSymbols(info string) ([]symbol, []string, error) {
	var out []symbol
	var libs []string
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		m := libLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		from, _ := strconv.ParseUint(m[1], 0, 64)
		f, err := elf.Open(m[2])
		if err != nil {
			return nil, nil, err
		}
		text := f.Section(".text")
		f.Close()
		if text == nil {
			return nil, nil, fmt.Errorf("%s: no .text", m[2])
		}
		bias := from - text.Addr
		syms, err := funcSymbols(m[2], bias)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, syms...)
		libs = append(libs, fmt.Sprintf("%s at bias %#x", m[2], bias))
	}
	return out, libs, nil
}

// runMode captures a user's program (see the package comment).
func runMode(c runConfig) error {
	cp, err := capture(c)
	if err != nil {
		return err
	}
	// Load bias of the executable: where gdb found main minus main's
	// value in the file (0 for a non-PIE executable).
	mainVal, err := symbolValue(c.prog, "main")
	if err != nil {
		return err
	}
	bias := cp.Main - mainVal
	syms, err := funcSymbols(c.prog, bias)
	if err != nil {
		return err
	}
	lsyms, libs, err := libSymbols(cp.Libs)
	if err != nil {
		return err
	}
	syms = append(syms, lsyms...)
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].Addr < syms[j].Addr })

	stack, err := hex.DecodeString(cp.Stack.Hex)
	if err != nil {
		return err
	}
	regions := []region{{Name: "stack", Kind: "stack", Base: hexU64(cp.Stack.Base), Data: stack}}
	s := snapshot{
		Version: 1, Arch: "arm64", VABits: 48, TBI: true,
		Regs: regs{hexU64(cp.Regs["pc"]), hexU64(cp.Regs["sp"]), hexU64(cp.Regs["x18"]), hexU64(cp.Regs["x29"]), hexU64(cp.Regs["x30"])},
	}
	if c.scsExpr != "" {
		scs, err := hex.DecodeString(cp.SCS.Hex)
		if err != nil {
			return err
		}
		regions = append(regions, region{Name: "scs", Kind: "scs", Base: hexU64(cp.SCS.Base), Data: scs})
		b := hexU64(cp.SCSBase)
		s.SCSBase = &b
	}
	s.Regions, s.Symbols = regions, syms
	if c.expect != "" {
		s.Expect = strings.Split(c.expect, ",")
	}
	ref := &gdbRef{Version: cp.GDB}
	for _, f := range cp.Backtrace {
		ref.Backtrace = append(ref.Backtrace, gdbFrame{PC: hexU64(f.PC), Func: f.Func, Type: f.Type, LR: hexU64(f.LR)})
	}
	s.GDB = ref
	qemu, _ := exec.Command("qemu-aarch64", "--version").Output()
	qv := strings.SplitN(string(qemu), "\n", 2)[0]
	s.Source = source{Scenario: c.args, Program: c.binName, Binary: c.binName, QEMU: strings.TrimSpace(qv) + " -cpu " + c.cpu,
		Note: c.note, Break: c.brk, Hit: c.hit, Finish: c.finish, Libraries: libs}
	b, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	d := &dump{r: s.Regs, regions: regions}
	if s.SCSBase != nil {
		d.scsBase = uint64(*s.SCSBase)
	}
	fp, scs := checkWalks(d, syms)
	var gdbNames []string
	for _, f := range ref.Backtrace {
		gdbNames = append(gdbNames, fmt.Sprintf("%s[%s]", symName(syms, uint64(f.PC)), f.Type))
	}
	fmt.Printf("%s\n  expect %s\n  fp     %s\n  scs    %s\n  gdb    %s\n", c.out, strings.Join(s.Expect, " "),
		strings.Join(fp, " "), strings.Join(scs, " "), strings.Join(gdbNames, " "))
	return nil
}
