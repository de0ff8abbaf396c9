package scs

import "fmt"

// Cost counts what one piece of entry or exit code adds because of the
// shadow call stack: memory loads, memory stores and instructions. An
// instruction that exists without CONFIG_SHADOW_CALL_STACK (for example
// SDEI's save and restore of all general registers, x18 among them) is not
// counted.
type Cost struct {
	Loads, Stores, Insns int
}

// Add returns c + d.
func (c Cost) Add(d Cost) Cost {
	return Cost{c.Loads + d.Loads, c.Stores + d.Stores, c.Insns + d.Insns}
}

// String formats c as "2 loads, 1 store, 6 insns".
func (c Cost) String() string {
	return fmt.Sprintf("%d %s, %d %s, %d %s", c.Loads, plural(c.Loads, "load"), c.Stores, plural(c.Stores, "store"), c.Insns, plural(c.Insns, "insn"))
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// insn is one instruction of an entry or exit sequence.
type insn struct {
	asm           string
	load, store   bool
	interruptedPC bool // only with KeepInterruptedPC
}

// Building blocks, as the kernel's assembler macros expand them
// (arch/arm64/include/asm/assembler.h).
func ldrThisCPU(dst, sym, tmp string) []insn {
	return []insn{
		{asm: "adrp " + dst + ", " + sym},
		{asm: "add " + dst + ", " + dst + ", :lo12:" + sym},
		{asm: "mrs " + tmp + ", tpidr_el1"},
		{asm: "ldr " + dst + ", [" + dst + ", " + tmp + "]", load: true},
	}
}

// strThisCPU is the seed patch's str_this_cpu macro.
func strThisCPU(src, sym, tmp0, tmp1 string) []insn {
	return []insn{
		{asm: "adrp " + tmp0 + ", " + sym},
		{asm: "add " + tmp0 + ", " + tmp0 + ", :lo12:" + sym},
		{asm: "mrs " + tmp1 + ", tpidr_el1"},
		{asm: "str " + src + ", [" + tmp0 + ", " + tmp1 + "]", store: true},
	}
}

func cat(parts ...[]insn) []insn {
	var out []insn
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func one(asm string, load, store bool) []insn { return []insn{{asm: asm, load: load, store: store}} }

func markPC(s []insn) []insn {
	for i := range s {
		s[i].interruptedPC = true
	}
	return s
}

var sdeiSym = [NumContexts]string{CtxSDEINormal: "normal", CtxSDEICritical: "critical"}

// sequence returns the SCS-related instructions of context c's entry or
// exit under policy p, including the KeepInterruptedPC store (marked).
// What the code does with x18 follows where the policy keeps it
// (Policy.SavedX18), never the policy's name.
func sequence(p Policy, c Context, exit bool) []insn {
	w := p.SavedX18(c)
	switch c {
	case CtxIRQ:
		if !exit {
			var save []insn
			switch w {
			case InThreadInfo: // call_on_irq_stack today
				save = cat(one("mrs x16, sp_el0", false, false),
					one("str x18, [x16, #TSK_TI_SCS_SP]", false, true))
			case OnInterruptedStack: // call_on_irq_stack in 2022
				save = one("stp x18, xzr, [sp, #-16]!", false, true)
			case InPerCPU: // the seed patch
				save = strThisCPU("x18", "irq_shadow_call_stack_saved_ptr", "x15", "x17")
			}
			pc := markPC(cat(one("ldr x16, [x0, #S_PC]", true, false),
				strThisCPU("x16", "irq_interrupted_pc", "x15", "x17")))
			return cat(save, ldrThisCPU("x18", "irq_shadow_call_stack_ptr", "x17"), pc)
		}
		switch w {
		case InThreadInfo: // scs_load_current
			return cat(one("mrs x16, sp_el0", false, false),
				one("ldr x18, [x16, #TSK_TI_SCS_SP]", true, false))
		case OnInterruptedStack:
			return one("ldp x18, xzr, [sp], #16", true, false)
		case InPerCPU:
			return cat(ldrThisCPU("x18", "irq_shadow_call_stack_saved_ptr", "x17"),
				strThisCPU("xzr", "irq_shadow_call_stack_saved_ptr", "x15", "x17"))
		}
	case CtxSDEINormal, CtxSDEICritical:
		// __sdei_asm_handler: w4 holds the event priority, already loaded
		// to pick the SDEI stack; x18 is saved and restored with the other
		// interrupted registers whatever the configuration.
		normal := c == CtxSDEINormal
		sym := "sdei_shadow_call_stack_" + sdeiSym[c]
		if !exit {
			s := one("cbnz w4, 3f", false, false)
			if w == InPerCPU { // the seed patch's extra store
				s = cat(s, strThisCPU("x18", sym+"_saved_ptr", "x5", "x6"))
			}
			s = cat(s, ldrThisCPU("x18", sym+"_ptr", "x6"))
			if normal {
				s = cat(s, one("b 4f", false, false))
			}
			// The interrupted PC arrives in x2.
			return cat(s, markPC(strThisCPU("x2", "sdei_"+sdeiSym[c]+"_interrupted_pc", "x5", "x6")))
		}
		if w != InPerCPU {
			return nil // InSDEIRegs: x18 comes back with ldp x18, x19 of the register restore
		}
		s := cat(one("ldrb w5, [x4, #SDEI_EVENT_PRIORITY]", true, false),
			one("cbnz w5, 5f", false, false),
			ldrThisCPU("x18", sym+"_saved_ptr", "x6"),
			strThisCPU("xzr", sym+"_saved_ptr", "x5", "x6"))
		if normal {
			s = cat(s, one("b 6f", false, false))
		}
		return s
	}
	return nil
}

func costOf(s []insn, keepPC bool) Cost {
	var c Cost
	for _, i := range s {
		if i.interruptedPC && !keepPC {
			continue
		}
		c.Insns++
		if i.load {
			c.Loads++
		}
		if i.store {
			c.Stores++
		}
	}
	return c
}

// costTable[keepPC][policy][context][exit] is precomputed at init.
var costTable [2][numPolicies][NumContexts][2]Cost

// switchCost is cpu_switch_to's scs_save and scs_load_current, the same
// under every policy.
var switchCost = Cost{Loads: 1, Stores: 1, Insns: 3}

func init() {
	for k := range 2 {
		for p := ThreadInfo; p < numPolicies; p++ {
			for c := CtxIRQ; c < NumContexts; c++ {
				for e := range 2 {
					costTable[k][p][c][e] = costOf(sequence(p, c, e == 1), k == 1)
				}
			}
		}
	}
}

// EntryCost returns what entering context c costs under policy p: the
// SCS-related loads, stores and instructions of the entry sequence. CtxTask has
// no entry (it is entered by Switch, which costs the same under every
// policy: SwitchCost).
func EntryCost(p Policy, c Context, keepInterruptedPC bool) Cost {
	if p >= numPolicies || c >= NumContexts {
		return Cost{}
	}
	return costTable[b2i(keepInterruptedPC)][p][c][0]
}

// ExitCost returns what leaving context c costs under policy p.
func ExitCost(p Policy, c Context, keepInterruptedPC bool) Cost {
	if p >= numPolicies || c >= NumContexts {
		return Cost{}
	}
	return costTable[b2i(keepInterruptedPC)][p][c][1]
}

// SwitchCost returns what a task switch's scs_save and scs_load_current
// cost: one store and one load, under every policy.
func SwitchCost() Cost { return switchCost }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Stats counts what a Model has executed, summed over its CPUs.
type Stats struct {
	// Entries and Exits count context entries and exits by context.
	Entries, Exits [NumContexts]uint64
	// Switches, Pushes and Pops count task switches and shadow stack
	// pushes and pops.
	Switches, Pushes, Pops uint64
	// Entry is the SCS-related cost of all entries and exits together
	// (what the policy makes every exception pay); Switch is that of all
	// task switches.
	Entry, Switch TotalCost
}

// TotalCost is a Cost summed over many events.
type TotalCost struct {
	Loads, Stores, Insns uint64
}

func (t *TotalCost) add(c Cost, times uint64) {
	t.Loads += uint64(c.Loads) * times
	t.Stores += uint64(c.Stores) * times
	t.Insns += uint64(c.Insns) * times
}
