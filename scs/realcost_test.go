package scs

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// dinsn is one instruction of a disassembly excerpt.
type dinsn struct {
	addr uint64
	mn   string // mnemonic
	ops  string // operands, whitespace collapsed
}

func (i dinsn) text() string { return strings.TrimSpace(i.mn + " " + i.ops) }

func (i dinsn) load() bool {
	return strings.HasPrefix(i.mn, "ldr") || strings.HasPrefix(i.mn, "ldp") || strings.HasPrefix(i.mn, "ldur")
}

func (i dinsn) store() bool {
	return strings.HasPrefix(i.mn, "str") || strings.HasPrefix(i.mn, "stp") || strings.HasPrefix(i.mn, "stur")
}

var (
	x18RE   = regexp.MustCompile(`\bx18\b`)
	dFuncRE = regexp.MustCompile(`^([0-9a-f]{16}) <([^>]+)>:$`)
	dInsnRE = regexp.MustCompile(`^\s*([0-9a-f]+):\s+[0-9a-f]{8}\s+(\S+)\s*(.*)$`)
)

// readObjdump parses testdata/kernel/entrycost.sh's output: GNU objdump's
// disassembly of some functions, by function.
func readObjdump(t *testing.T, path string) map[string][]dinsn {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]dinsn{}
	fn := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ln := sc.Text()
		if m := dFuncRE.FindStringSubmatch(ln); m != nil {
			fn = m[2]
			continue
		}
		m := dInsnRE.FindStringSubmatch(ln)
		if m == nil || fn == "" {
			continue
		}
		a, _ := strconv.ParseUint(m[1], 16, 64)
		ops, _, _ := strings.Cut(m[3], "//") // objdump's comments
		ops, _, _ = strings.Cut(ops, "<")    // and branch targets' symbols
		out[fn] = append(out[fn], dinsn{addr: a, mn: m[2], ops: strings.Join(strings.Fields(ops), " ")})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// region returns the instructions strictly between the first one equal to
// from (at or after index start) and the next one equal to to, and the
// index of to.
func region(t *testing.T, what string, code []dinsn, start int, from, to string) ([]dinsn, int) {
	t.Helper()
	i := start
	for i < len(code) && code[i].text() != from {
		i++
	}
	j := i + 1
	for j < len(code) && code[j].text() != to {
		j++
	}
	if j >= len(code) {
		t.Fatalf("%s: no %q followed by %q", what, from, to)
	}
	return code[i+1 : j], j
}

// run executes a straight-line region with forward branches (cbnz taken or
// not, b always) from its first instruction until it leaves the region, and
// returns what ran.
func run(t *testing.T, what string, r []dinsn, taken bool) []dinsn {
	t.Helper()
	var out []dinsn
	for i := 0; i < len(r); {
		in := r[i]
		out = append(out, in)
		target := uint64(0)
		switch in.mn {
		case "b":
			target, _ = strconv.ParseUint(strings.Fields(in.ops)[0], 16, 64)
		case "cbnz", "cbz":
			if taken {
				f := strings.Fields(in.ops)
				target, _ = strconv.ParseUint(f[len(f)-1], 16, 64)
			}
		}
		if target == 0 {
			i++
			continue
		}
		if target <= in.addr {
			t.Fatalf("%s: backward branch %s", what, in.text())
		}
		for i < len(r) && r[i].addr != target {
			i++
		}
	}
	return out
}

func costOfReal(s []dinsn) Cost {
	var c Cost
	for _, i := range s {
		c.Insns++
		if i.load() {
			c.Loads++
		}
		if i.store() {
			c.Stores++
		}
	}
	return c
}

func mnemonics[T any](s []T, f func(T) string) string {
	var out []string
	for _, x := range s {
		out = append(out, f(x))
	}
	return strings.Join(out, " ")
}

func listing(s []dinsn) string {
	var b strings.Builder
	for _, i := range s {
		fmt.Fprintf(&b, "\t%x: %s\n", i.addr, i.text())
	}
	return b.String()
}

// TestEntryCostMatchesRealKernels holds the model's cost table (EntryCost,
// ExitCost, SwitchCost) to the entry code of three real 6.12 SCS kernels,
// one per x18 policy, as GNU objdump disassembles their vmlinux
// (testdata/kernel/entrycost/*.txt, from testdata/kernel/entrycost.sh):
// mainline's call_on_irq_stack (thread_info.scs_sp), scs-onstack.patch's
// (the 2022 on-stack slot) and scs-percpu.patch's (the seed's per-CPU
// irq_shadow_call_stack_saved_ptr), and each kernel's __sdei_asm_handler
// (built in, never run under QEMU) and cpu_switch_to.
//
// The SCS code is what lies between fixed anchors of the source:
// call_on_irq_stack's entry between save_and_disable_daif's `msr daifset`
// and the frame record's `stp x29, x30`, its exit between `ldp x29, x30`
// and restore_irq's `msr daif, x9`; __sdei_asm_handler's entry between the
// SDEI stack switch's `mov sp, x5` and `mrs x28, sp_el0`, its exit between
// `mov sp, x1` and `mov x1, x0`, run once with the priority branch not
// taken (normal event) and once taken (critical); cpu_switch_to's is every
// instruction naming x18. For each, the instruction count, loads, stores
// and the mnemonics in order must be the model's (KeepInterruptedPC off:
// no kernel keeps the interrupted pc).
func TestEntryCostMatchesRealKernels(t *testing.T) {
	for _, k := range []struct {
		name string
		p    Policy
	}{
		{"scs-6.12", ThreadInfo},
		{"scs-6.12-onstack", OnStack},
		{"scs-6.12-percpu", PerCPU},
	} {
		fns := readObjdump(t, "../testdata/kernel/entrycost/"+k.name+".txt")
		check := func(what string, c Context, exit bool, real []dinsn) {
			t.Helper()
			want := EntryCost(k.p, c, false)
			if exit {
				want = ExitCost(k.p, c, false)
			}
			got := costOfReal(real)
			model := sequence(k.p, c, exit)
			var kept []insn
			for _, i := range model {
				if !i.interruptedPC {
					kept = append(kept, i)
				}
			}
			mm := mnemonics(kept, func(i insn) string { mn, _, _ := strings.Cut(i.asm, " "); return mn })
			rm := mnemonics(real, func(i dinsn) string { return i.mn })
			if got != want || mm != rm {
				t.Errorf("%s %s: real %v (%s), model %v (%s)\n%s", k.name, what, got, rm, want, mm, listing(real))
			}
			t.Logf("%s %s: %v: %s", k.name, what, got, strings.Join(strings.Fields(mnemonics(real, dinsn.text)), " "))
		}
		col := fns["call_on_irq_stack"]
		if len(col) == 0 {
			t.Fatalf("%s: no call_on_irq_stack", k.name)
		}
		entry, at := region(t, k.name+" call_on_irq_stack entry", col, 0, "msr daifset, #0xf", "stp x29, x30, [sp, #-16]!")
		check("call_on_irq_stack entry", CtxIRQ, false, run(t, k.name, entry, false))
		exit, _ := region(t, k.name+" call_on_irq_stack exit", col, at, "ldp x29, x30, [sp], #16", "msr daif, x9")
		check("call_on_irq_stack exit", CtxIRQ, true, run(t, k.name, exit, false))
		// The whole function, for the README: its first instruction to
		// the blr, and after the blr to the ret.
		blr := 0
		for blr < len(col) && col[blr].mn != "blr" {
			blr++
		}
		if blr == len(col) || col[len(col)-1].mn != "ret" {
			t.Fatalf("%s: call_on_irq_stack has no blr or does not end in ret", k.name)
		}
		t.Logf("%s call_on_irq_stack whole: entry (to the blr) %v, exit (after it) %v", k.name, costOfReal(col[:blr+1]), costOfReal(col[blr+1:]))

		sd := fns["__sdei_asm_handler"]
		if len(sd) == 0 {
			t.Fatalf("%s: no __sdei_asm_handler", k.name)
		}
		sEntry, at := region(t, k.name+" __sdei_asm_handler entry", sd, 0, "mov sp, x5", "mrs x28, sp_el0")
		sExit, _ := region(t, k.name+" __sdei_asm_handler exit", sd, at, "mov sp, x1", "mov x1, x0")
		for _, c := range []Context{CtxSDEINormal, CtxSDEICritical} {
			critical := c == CtxSDEICritical
			check("__sdei_asm_handler entry, "+c.String(), c, false, run(t, k.name, sEntry, critical))
			check("__sdei_asm_handler exit, "+c.String(), c, true, run(t, k.name, sExit, critical))
		}

		var sw []dinsn
		for _, i := range fns["cpu_switch_to"] {
			if x18RE.MatchString(i.ops) {
				sw = append(sw, i)
			}
		}
		if got := costOfReal(sw); got != SwitchCost() {
			t.Errorf("%s cpu_switch_to: instructions naming x18 cost %v, model %v\n%s", k.name, got, SwitchCost(), listing(sw))
		}
	}
}
