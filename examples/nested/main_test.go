package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/machine"
)

// TestDemo runs the README's main command for every policy and checks
// the report says what the rules say, row by row.
func TestDemo(t *testing.T) {
	for _, tc := range []struct {
		policy string
		keep   bool
		want   []string
	}{
		{"thread_info", false, []string{
			`crc32_leaf\+0x0 +task +pt_regs +- +crc32_leaf\+0x0 \[regs-pc\] +SCS: interrupted pc`,
			`memcpy_fast\+0x\w+ +task +x30 +- +- +SCS: saved only in x30`,
			`process_one_work\+0x\w+ +task +memcpy_fast +process_one_work\+0x\w+ \[scs\] +- +FP: memcpy_fast builds no frame record`,
			`el1h_64_irq_handler\+0x\w+ +task +call_on_irq_stack +- +el1h_64_irq_handler\+0x\w+ \[frame\] +SCS: call_on_irq_stack does not push`,
			`sdei_event_handler\+0x\w+ +sdei-normal +asm_helper +- +sdei_event_handler`,
			`ret_from_fork\+0x8 +task +worker_thread +ret_from_fork\+0x8 \[scs\] +ret_from_fork\+0x8 \[frame\]`,
			`per-cpu +irq +1 load, 1 store, 8 insns +1 load, 1 store, 8 insns`,
		}},
		{"per-cpu", true, []string{
			`crc32_leaf\+0x0 +task +pt_regs +crc32_leaf\+0x0 \[interrupted-pc\] +crc32_leaf\+0x0 \[regs-pc\]`,
		}},
		{"on-stack", false, []string{
			`ghes_notify_sdei\+0x\w+ +sdei-critical +kmalloc +ghes_notify_sdei\+0x\w+ \[scs\]`,
			`worker_thread\+0x\w+ +task +process_one_work +- +worker_thread\+0x\w+ \[frame\] +SCS: OnStack policy`,
			`SCS copy ended with: scs: interrupted context's shadow stack pointer is hidden`,
		}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			var b strings.Builder
			var pol machine.Policy
			if err := pol.UnmarshalText([]byte(tc.policy)); err != nil {
				t.Fatal(err)
			}
			if err := run(&b, pol, true, tc.keep, false, false); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, re := range tc.want {
				if !regexp.MustCompile(re).MatchString(out) {
					t.Errorf("report lacks /%s/:\n%s", re, out)
				}
			}
		})
	}
	if err := run(new(strings.Builder), machine.Policy(9), true, false, false, false); err == nil {
		t.Error("unknown policy accepted")
	}
}
