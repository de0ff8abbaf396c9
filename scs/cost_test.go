package scs

import (
	"strings"
	"testing"
)

// TestEntryExitCosts asserts the per-policy cost of each entry and exit,
// counted by hand from the instruction sequences:
//
//	IRQ entry  thread_info: mrs sp_el0; str x18,[tsk]; ldr_this_cpu (adrp, add, mrs, ldr)
//	           on-stack:    stp x18, xzr, [sp,#-16]!; ldr_this_cpu
//	           per-cpu:     str_this_cpu (adrp, add, mrs, str); ldr_this_cpu
//	IRQ exit   thread_info: mrs sp_el0; ldr x18,[tsk]
//	           on-stack:    ldp x18, xzr, [sp], #16
//	           per-cpu:     ldr_this_cpu; str_this_cpu xzr
//	SDEI entry all:         cbnz w4; ldr_this_cpu; (b 4f on the normal path)
//	           per-cpu adds str_this_cpu of the saved pointer
//	SDEI exit  thread_info, on-stack: nothing (x18 is in the register restore)
//	           per-cpu:     ldrb priority; cbnz; ldr_this_cpu; str_this_cpu xzr; (b 6f normal)
//
// KeepInterruptedPC adds, on IRQ entry, ldr of regs->pc and str_this_cpu
// (1 load, 1 store, 5 insns) and on SDEI entry str_this_cpu of x2 (1
// store, 4 insns).
func TestEntryExitCosts(t *testing.T) {
	type row struct {
		p           Policy
		c           Context
		entry, exit Cost
	}
	rows := []row{
		{ThreadInfo, CtxIRQ, Cost{1, 1, 6}, Cost{1, 0, 2}},
		{OnStack, CtxIRQ, Cost{1, 1, 5}, Cost{1, 0, 1}},
		{PerCPU, CtxIRQ, Cost{1, 1, 8}, Cost{1, 1, 8}},
		{ThreadInfo, CtxSDEINormal, Cost{1, 0, 6}, Cost{0, 0, 0}},
		{OnStack, CtxSDEINormal, Cost{1, 0, 6}, Cost{0, 0, 0}},
		{PerCPU, CtxSDEINormal, Cost{1, 1, 10}, Cost{2, 1, 11}},
		{ThreadInfo, CtxSDEICritical, Cost{1, 0, 5}, Cost{0, 0, 0}},
		{OnStack, CtxSDEICritical, Cost{1, 0, 5}, Cost{0, 0, 0}},
		{PerCPU, CtxSDEICritical, Cost{1, 1, 9}, Cost{2, 1, 10}},
	}
	pcExtra := map[Context]Cost{CtxIRQ: {1, 1, 5}, CtxSDEINormal: {0, 1, 4}, CtxSDEICritical: {0, 1, 4}}
	for _, r := range rows {
		if got := EntryCost(r.p, r.c, false); got != r.entry {
			t.Errorf("%s %s entry: %v, want %v\n%s", r.p, r.c, got, r.entry, strings.Join(sequenceText(r.p, r.c, false, false), "\n"))
		}
		if got := ExitCost(r.p, r.c, false); got != r.exit {
			t.Errorf("%s %s exit: %v, want %v\n%s", r.p, r.c, got, r.exit, strings.Join(sequenceText(r.p, r.c, true, false), "\n"))
		}
		if got, want := EntryCost(r.p, r.c, true), r.entry.Add(pcExtra[r.c]); got != want {
			t.Errorf("%s %s entry with interrupted pc: %v, want %v", r.p, r.c, got, want)
		}
		if got := ExitCost(r.p, r.c, true); got != r.exit {
			t.Errorf("%s %s exit with interrupted pc: %v, want %v", r.p, r.c, got, r.exit)
		}
		for _, exit := range []bool{false, true} {
			for _, pc := range []bool{false, true} {
				seq := sequenceText(r.p, r.c, exit, pc)
				want := EntryCost(r.p, r.c, pc)
				if exit {
					want = ExitCost(r.p, r.c, pc)
				}
				var got Cost
				for _, l := range seq {
					got.Insns++
					if strings.HasSuffix(l, "; load") {
						got.Loads++
					}
					if strings.HasSuffix(l, "; store") {
						got.Stores++
					}
				}
				if got != want {
					t.Errorf("%s %s exit=%v pc=%v: Sequence counts %v, cost %v", r.p, r.c, exit, pc, got, want)
				}
			}
		}
	}
	// The seed's objection in one number: per IRQ round trip, the per-CPU
	// policy performs one more store than mainline.
	irq := func(p Policy) Cost { return EntryCost(p, CtxIRQ, false).Add(ExitCost(p, CtxIRQ, false)) }
	if d := irq(PerCPU).Stores - irq(ThreadInfo).Stores; d != 1 {
		t.Errorf("per-cpu IRQ round trip adds %d stores over thread_info, want 1", d)
	}
	if EntryCost(ThreadInfo, CtxTask, false) != (Cost{}) || EntryCost(9, CtxIRQ, false) != (Cost{}) || sequenceText(9, CtxIRQ, false, false) != nil {
		t.Error("no cost for task entry or unknown policy")
	}
	if SwitchCost() != (Cost{1, 1, 3}) {
		t.Error("switch cost")
	}
}

// sequenceText lists the SCS-related instructions of context c's entry (or
// exit) under policy p, one per line in kernel assembler syntax, with
// "; load" or "; store" appended to memory accesses: the lines EntryCost
// and ExitCost count. Presentation for tests, not API.
func sequenceText(p Policy, c Context, exit, keepInterruptedPC bool) []string {
	if p >= numPolicies || c >= NumContexts {
		return nil
	}
	var out []string
	for _, i := range sequence(p, c, exit) {
		if i.interruptedPC && !keepInterruptedPC {
			continue
		}
		s := i.asm
		switch {
		case i.load:
			s += "\t; load"
		case i.store:
			s += "\t; store"
		}
		out = append(out, s)
	}
	return out
}

// TestSequenceText pins the instructions counted for each policy's IRQ
// exit and SDEI entry, in the kernel's assembler syntax.
func TestSequenceText(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		c    Context
		exit bool
		keep bool
		want []string
	}{
		{PerCPU, CtxIRQ, true, false, []string{
			"adrp x18, irq_shadow_call_stack_saved_ptr",
			"add x18, x18, :lo12:irq_shadow_call_stack_saved_ptr",
			"mrs x17, tpidr_el1",
			"ldr x18, [x18, x17]\t; load",
			"adrp x15, irq_shadow_call_stack_saved_ptr",
			"add x15, x15, :lo12:irq_shadow_call_stack_saved_ptr",
			"mrs x17, tpidr_el1",
			"str xzr, [x15, x17]\t; store",
		}},
		{ThreadInfo, CtxIRQ, true, false, []string{"mrs x16, sp_el0", "ldr x18, [x16, #TSK_TI_SCS_SP]\t; load"}},
		{OnStack, CtxIRQ, false, false, []string{
			"stp x18, xzr, [sp, #-16]!\t; store",
			"adrp x18, irq_shadow_call_stack_ptr",
			"add x18, x18, :lo12:irq_shadow_call_stack_ptr",
			"mrs x17, tpidr_el1",
			"ldr x18, [x18, x17]\t; load",
		}},
		{OnStack, CtxSDEINormal, true, false, nil},
		{ThreadInfo, CtxSDEICritical, false, false, []string{
			"cbnz w4, 3f",
			"adrp x18, sdei_shadow_call_stack_critical_ptr",
			"add x18, x18, :lo12:sdei_shadow_call_stack_critical_ptr",
			"mrs x6, tpidr_el1",
			"ldr x18, [x18, x6]\t; load",
		}},
	} {
		got := sequenceText(tc.p, tc.c, tc.exit, tc.keep)
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s %s exit=%v:\n%s\nwant\n%s", tc.p, tc.c, tc.exit, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
		cost := EntryCost(tc.p, tc.c, tc.keep)
		if tc.exit {
			cost = ExitCost(tc.p, tc.c, tc.keep)
		}
		if cost.Insns != len(got) {
			t.Errorf("%s %s exit=%v: cost counts %d insns, text has %d", tc.p, tc.c, tc.exit, cost.Insns, len(got))
		}
	}
}

// TestStatsCount drives a scripted run and checks the counters and the
// total entry cost against the per-event table.
func TestStatsCount(t *testing.T) {
	for _, p := range Policies {
		for _, keep := range []bool{false, true} {
			r := newRig(t, Config{Policy: p, KeepInterruptedPC: keep, NumCPU: 2})
			m := r.m
			var want TotalCost
			add := func(c Cost) {
				want.Loads += uint64(c.Loads)
				want.Stores += uint64(c.Stores)
				want.Insns += uint64(c.Insns)
			}
			for cpu := range 2 {
				for range 3 {
					if err := r.enterIRQ(cpu, 1); err != nil {
						t.Fatal(err)
					}
					if err := m.EnterSDEI(cpu, false, 0, 2); err != nil {
						t.Fatal(err)
					}
					if err := m.EnterSDEI(cpu, true, 0, 3); err != nil {
						t.Fatal(err)
					}
					m.ExitSDEI(cpu)
					m.ExitSDEI(cpu)
					r.exitIRQ(cpu)
					for _, c := range []Context{CtxIRQ, CtxSDEINormal, CtxSDEICritical} {
						add(EntryCost(p, c, keep))
						add(ExitCost(p, c, keep))
					}
				}
			}
			s := m.Stats()
			for _, c := range []Context{CtxIRQ, CtxSDEINormal, CtxSDEICritical} {
				if s.Entries[c] != 6 || s.Exits[c] != 6 {
					t.Errorf("%s: %s entries %d exits %d, want 6", p, c, s.Entries[c], s.Exits[c])
				}
			}
			if s.Entry != want {
				t.Errorf("%s keep=%v: entry cost %+v, want %+v", p, keep, s.Entry, want)
			}
		}
	}
}
